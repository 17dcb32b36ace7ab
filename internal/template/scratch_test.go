package template

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// NewBuilder removes what crashed builds and deletes left, and nothing a
// running build (of this process or another) or an installed template holds.
func TestNewBuilderRemovesStaleScratch(t *testing.T) {
	templates := filepath.Join(t.TempDir(), "templates")
	mkdir := func(rel string) string {
		p := filepath.Join(templates, rel)
		if err := os.MkdirAll(filepath.Join(p, "root", "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mkdir(".build-crashed-123")
	mkdir(".deleting-456")
	mkdir("kept/" + strings.Repeat("a", 64))
	// A build running here holds its scratch dir's lock...
	running, release, err := newScratch(templates, "running")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	// ...and so does one in another process.
	other := mkdir(".build-other-789")
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("needs flock(1) (util-linux)")
	}
	// It holds the lock until its stdin closes.
	cmd := exec.Command("flock", "--exclusive", other, "sh", "-c", "echo locked; exec cat")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("flock(1): %q %v", line, err)
	}

	agent := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agent, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewBuilder(BuilderConfig{TemplatesDir: templates, AgentBinary: agent}); err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Base(other), filepath.Base(running), "kept"}
	if got := names(t, templates); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after NewBuilder: %v, want %v", got, want)
	}

	// Once they end, the next sweep removes theirs too.
	release()
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := removeStaleScratch(templates); err != nil {
		t.Fatal(err)
	}
	if got := names(t, templates); strings.Join(got, " ") != "kept" {
		t.Fatalf("after the builds ended: %v, want [kept]", got)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}
