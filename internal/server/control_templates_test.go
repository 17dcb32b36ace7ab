package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// A build's path source is read on the control plane only when it is a
// file under a source root (symlinks resolved first), as on one node;
// a directory cannot travel to the build's worker.
func TestBuildSourceFile(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	in := filepath.Join(root, "rootfs.tar")
	secret := filepath.Join(outside, "shadow")
	for _, p := range []string{in, secret} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	escape := filepath.Join(root, "escape.tar")
	if err := os.Symlink(secret, escape); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &workerBuilds{sourceRoots: []string{root}}
	if got, err := b.sourceFile(in); err != nil || got != in {
		t.Fatalf("a tar under the root: %q, %v", got, err)
	}
	for path, class := range map[string]*errdefs.Class{
		secret:                      errdefs.ErrPermissionDenied,
		escape:                      errdefs.ErrPermissionDenied,
		filepath.Join(root, "dir"):  errdefs.ErrFailedPrecondition,
		filepath.Join(root, "none"): errdefs.ErrInvalidArgument,
		"relative.tar":              errdefs.ErrInvalidArgument,
		root + "/../" + filepath.Base(outside) + "/shadow": errdefs.ErrPermissionDenied,
	} {
		if _, err := b.sourceFile(path); errdefs.ClassOf(err) != class {
			t.Errorf("sourceFile(%s) = %v, want %v", path, err, class)
		}
	}
}

// Builds go to the least loaded Ready worker first; not Ready ones and
// ones without an address never get one.
func TestBuildWorkerOrder(t *testing.T) {
	hosts := []worker.HostStatus{
		{Name: "busy", Ready: true, Address: "10.0.0.1:7070", Capacity: worker.Resources{VCPUs: 4}, Allocated: worker.Resources{VCPUs: 3}},
		{Name: "down", Ready: false, Address: "10.0.0.2:7070", Capacity: worker.Resources{VCPUs: 4}},
		{Name: "idle-b", Ready: true, Address: "10.0.0.3:7070", Capacity: worker.Resources{VCPUs: 8}, Allocated: worker.Resources{VCPUs: 2}},
		{Name: "idle-a", Ready: true, Address: "10.0.0.4:7070", Capacity: worker.Resources{VCPUs: 4}, Allocated: worker.Resources{VCPUs: 1}},
		{Name: "noaddr", Ready: true, Capacity: worker.Resources{VCPUs: 4}},
	}
	var got []string
	for _, h := range readyByLoad(hosts) {
		got = append(got, h.Name)
	}
	want := []string{"idle-a", "idle-b", "busy"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("order %v, want %v", got, want)
	}
}
