package readysnap_test

import (
	"slices"
	"testing"

	"github.com/space-sandbox/space/internal/worker/local/readysnap"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

func TestCache(t *testing.T) {
	var c readysnap.Cache
	c.Drop("k0") // safe on the zero value
	if _, verified, _, failed := c.Look("k1", "base@sha256:1"); verified || failed {
		t.Fatal("a new key is known")
	}
	c.Failed("k1")
	if _, verified, _, failed := c.Look("k1", "base@sha256:1"); verified || !failed {
		t.Fatal("a failed key is not failed")
	}
	c.Ready("k1", snapfile.Manifest{VCPUs: 2})
	if m, verified, _, failed := c.Look("k1", "base@sha256:1"); !verified || failed || m.VCPUs != 2 {
		t.Fatalf("ready key: %+v verified %v failed %v", m, verified, failed)
	}
	c.Look("k2", "base@sha256:1")
	c.Look("k3", "other@sha256:2")
	refs := c.Refs()
	slices.Sort(refs)
	if !slices.Equal(refs, []string{"base@sha256:1", "other@sha256:2"}) {
		t.Fatalf("Refs = %v", refs)
	}
	c.Drop("k1")
	if _, verified, _, _ := c.Look("k1", "base@sha256:1"); verified {
		t.Fatal("a dropped key is still verified")
	}
	c.Ready("k1", snapfile.Manifest{})
	c.Forget(func(ref string) bool { return ref == "base@sha256:1" })
	if _, verified, _, _ := c.Look("k3", "other@sha256:2"); verified {
		t.Fatal("k3 was never ready")
	}
	if refs := c.Refs(); !slices.Equal(refs, []string{"other@sha256:2"}) {
		t.Fatalf("Refs after Forget = %v, want only the other build", refs)
	}
	unlock := c.Lock("k1")
	unlock()
	c.Lock("k1")() // free again
}
