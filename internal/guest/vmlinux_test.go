package guest

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

// TestVmlinuxOfCachedKernel extracts the real cached Debian kernel (the
// one `make setup` fetched) and checks Firecracker could load it.
func TestVmlinuxOfCachedKernel(t *testing.T) {
	k, err := Locate(KernelDirFromEnv())
	if err != nil {
		t.Skipf("needs the cached guest kernel (make setup): %v", err)
	}
	dir := t.TempDir()
	path, err := Vmlinux(k, dir)
	if err != nil {
		t.Fatalf("Vmlinux: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o004 == 0 {
		t.Fatalf("vmlinux %v mode %v: a jailed VMM must be able to read it", err, st.Mode())
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("not ELF: %v", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Entry == 0 {
		t.Errorf("machine %v entry %#x", f.Machine, f.Entry)
	}
	// Linux's banner is in the decompressed image.
	b, _ := os.ReadFile(path)
	if !bytes.Contains(b, []byte("Linux version "+k.Version)) {
		t.Errorf("vmlinux lacks the banner of %s", k.Version)
	}
	t.Logf("%s: %d MiB ELF, entry %#x", filepath.Base(path), st.Size()>>20, f.Entry)
	// Cached: the second call does not extract again.
	again, err := Vmlinux(k, dir)
	if err != nil || again != path {
		t.Errorf("second Vmlinux = %s, %v", again, err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("cache dir holds %d files, want 1", len(es))
	}
}

// fakeBzImage wraps payload in a minimal setup header.
func fakeBzImage(payload []byte) []byte {
	b := make([]byte, 5*512)
	b[0x1f1] = 4
	copy(b[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(b[0x206:], 0x20f)
	binary.LittleEndian.PutUint32(b[0x248:], 0)
	binary.LittleEndian.PutUint32(b[0x24c:], uint32(len(payload)))
	return append(b, payload...)
}

func TestExtractVmlinuxRejects(t *testing.T) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte("not an ELF file at all"))
	w.Close()
	for name, img := range map[string][]byte{
		"no setup header": []byte("MZ" + string(make([]byte, 1024))),
		"payload not ELF": fakeBzImage(gz.Bytes()),
		"xz payload":      fakeBzImage([]byte{0xfd, '7', 'z', 'X', 'Z', 0, 1, 2, 3, 4}),
		"unknown payload": fakeBzImage([]byte("garbage!garbage!")),
		"truncated":       fakeBzImage([]byte{0x02, 0x21, 0x4c, 0x18, 0xff, 0xff, 0, 0, 1, 2, 3, 4})[:5*512+8],
	} {
		if _, err := ExtractVmlinux(img); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: ExtractVmlinux = %v, want invalid_argument", name, err)
		}
	}
}
