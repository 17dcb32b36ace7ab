package template

import (
	"context"
	"testing"
	"time"
)

// Two builds of base from the same inputs, in two templates dirs and at
// different times, are the same image: in a cluster every control replica
// and worker builds base itself, and sandboxes name it by digest.
func TestBuildBaseReproducible(t *testing.T) {
	needBuildHost(t)
	agent := writeAgent(t, "stand-in agent for the reproducibility check\n")
	first, err := BuildBase(context.Background(), BaseOptions{TemplatesDir: t.TempDir(), AgentBinary: agent})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a second apart: times in seconds would differ
	second, err := BuildBase(context.Background(), BaseOptions{TemplatesDir: t.TempDir(), AgentBinary: agent})
	if err != nil {
		t.Fatal(err)
	}
	if first.Digest != second.Digest {
		t.Fatalf("two builds of the same base: %s and %s", first.Digest, second.Digest)
	}
}
