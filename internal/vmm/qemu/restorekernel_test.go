package qemu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
)

// fakeBzImage is a kernel file with a boot-protocol header of setupSects
// setup sectors followed by a payload.
func fakeBzImage(t *testing.T, dir string, setupSects byte, payload int) string {
	t.Helper()
	b := make([]byte, (int(setupSects)+1)*512+payload)
	for i := range b {
		b[i] = byte(i)
	}
	b[hdrSetupSects] = setupSects
	binary.LittleEndian.PutUint32(b[hdrMagicOff:], hdrMagic)
	p := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWriteRestoreKernel(t *testing.T) {
	dir := t.TempDir()
	kernel := fakeBzImage(t, dir, 30, 1<<20)
	spec := vmm.BootSpec{ID: "vm", StateDir: dir, Kernel: kernel, Initrd: filepath.Join(dir, "initrd")}
	got, err := writeRestoreKernel(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Initrd != "" || got.Kernel != filepath.Join(dir, fileRestoreKernel) {
		t.Fatalf("restore spec: kernel %q initrd %q", got.Kernel, got.Initrd)
	}
	if got.StateDir != spec.StateDir || got.ID != spec.ID {
		t.Fatalf("restore spec changed more than the kernel and initrd: %+v", got)
	}
	stub, err := os.ReadFile(got.Kernel)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := os.ReadFile(kernel)
	if want := full[:31*512]; !bytes.Equal(stub, want) {
		t.Fatalf("restore kernel is %d bytes, want the %d bytes of header and setup", len(stub), len(want))
	}
	// It is the driver's: removeOwned takes it away with the VMM's files.
	removeOwned(dir)
	if _, err := os.Stat(got.Kernel); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("restore kernel left after removeOwned: %v", err)
	}
}

func TestWriteRestoreKernelRejects(t *testing.T) {
	dir := t.TempDir()
	notBz := filepath.Join(dir, "elf")
	if err := os.WriteFile(notBz, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("HdrS"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{notBz, short, filepath.Join(dir, "missing")} {
		_, err := writeRestoreKernel(vmm.BootSpec{StateDir: dir, Kernel: k})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err %v, want invalid argument", filepath.Base(k), err)
		}
	}
}
