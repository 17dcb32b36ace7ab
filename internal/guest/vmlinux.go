package guest

import (
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Firecracker on x86-64 boots an uncompressed ELF kernel (vmlinux), not the
// bzImage Debian ships. A bzImage is a real-mode setup, a decompressor and
// the compressed vmlinux (its "payload"); the x86 boot protocol (2.08 and
// later) says where the payload is: payload_offset and payload_length in
// the setup header, counted from the start of the protected-mode code,
// which follows the setup_sects+1 sectors of the setup. The kernel's build
// appends the uncompressed size (4 bytes, little-endian) to the payload.

// maxVmlinux bounds the uncompressed kernel (Debian's cloud kernel is
// about 60 MiB).
const maxVmlinux = 512 << 20

// Vmlinux returns the path of k's uncompressed ELF kernel, extracting it
// from k.Vmlinuz into cacheDir the first time (the file's name carries the
// bzImage's digest, so a new kernel gets a new file). The file is world
// readable: jailed VMMs each run as their own uid.
func Vmlinux(k Kernel, cacheDir string) (string, error) {
	bz, err := os.ReadFile(k.Vmlinuz)
	if err != nil {
		return "", fmt.Errorf("guest: read kernel: %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	sum := sha256.Sum256(bz)
	path := filepath.Join(cacheDir, "vmlinux-"+k.Version+"-"+hex.EncodeToString(sum[:6]))
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
		return path, nil
	}
	out, err := ExtractVmlinux(bz)
	if err != nil {
		return "", fmt.Errorf("guest: kernel %s: %w", k.Version, err)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("guest: kernel cache: %v: %w", err, errdefs.ErrInternal)
	}
	tmp, err := os.CreateTemp(cacheDir, ".vmlinux-*")
	if err != nil {
		return "", fmt.Errorf("guest: kernel cache: %v: %w", err, errdefs.ErrInternal)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("guest: write vmlinux: %v: %w", err, errdefs.ErrInternal)
	}
	return path, nil
}

// ExtractVmlinux decompresses the kernel in bzImage and checks that it is
// an x86-64 ELF executable.
func ExtractVmlinux(bzImage []byte) ([]byte, error) {
	payload, err := bzPayload(bzImage)
	if err != nil {
		return nil, err
	}
	out, err := decompress(payload)
	if err != nil {
		return nil, err
	}
	if err := checkELF(out); err != nil {
		return nil, err
	}
	return out, nil
}

// bzPayload finds the compressed kernel in a bzImage through its setup
// header.
func bzPayload(b []byte) ([]byte, error) {
	if len(b) < 0x250 || string(b[0x202:0x206]) != "HdrS" {
		return nil, fmt.Errorf("not a bzImage (no setup header): %w", errdefs.ErrInvalidArgument)
	}
	if v := binary.LittleEndian.Uint16(b[0x206:]); v < 0x208 {
		return nil, fmt.Errorf("boot protocol %#x predates payload fields (2.08): %w", v, errdefs.ErrInvalidArgument)
	}
	setupSects := int(b[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	off := (setupSects+1)*512 + int(binary.LittleEndian.Uint32(b[0x248:]))
	n := int(binary.LittleEndian.Uint32(b[0x24c:]))
	if n < 8 || off < 0 || off+n > len(b) {
		return nil, fmt.Errorf("bzImage payload out of bounds: %w", errdefs.ErrInvalidArgument)
	}
	return b[off : off+n], nil
}

// decompress recognises the payload's format by its magic.
func decompress(p []byte) ([]byte, error) {
	size := binary.LittleEndian.Uint32(p[len(p)-4:]) // appended by the kernel's build
	body := p[:len(p)-4]
	var r io.Reader
	switch {
	case bytes.HasPrefix(p, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(bytes.NewReader(p)) // gzip's own trailer is the size
		if err != nil {
			return nil, fmt.Errorf("gzip payload: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		r = zr
	case bytes.HasPrefix(p, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderMaxMemory(maxVmlinux))
		if err != nil {
			return nil, fmt.Errorf("zstd payload: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		defer zr.Close()
		r = zr
	case bytes.HasPrefix(p, []byte{0x02, 0x21, 0x4c, 0x18}): // lz4 legacy frame (lz4 -l)
		r = lz4.NewReader(bytes.NewReader(body))
	case bytes.HasPrefix(p, []byte("BZh")):
		r = bzip2.NewReader(bytes.NewReader(body))
	case bytes.HasPrefix(p, []byte{0xfd, '7', 'z', 'X', 'Z', 0}), bytes.HasPrefix(p, []byte{0x5d, 0, 0}),
		bytes.HasPrefix(p, []byte{0x89, 'L', 'Z', 'O'}):
		return nil, fmt.Errorf("kernel payload compressed with xz, lzma or lzo, which this extractor does not read (gzip, zstd, lz4, bzip2): %w", errdefs.ErrInvalidArgument)
	default:
		return nil, fmt.Errorf("kernel payload in an unknown format (magic % x): %w", p[:4], errdefs.ErrInvalidArgument)
	}
	var out bytes.Buffer
	out.Grow(int(size))
	if _, err := io.Copy(&out, io.LimitReader(r, maxVmlinux+1)); err != nil {
		return nil, fmt.Errorf("decompress kernel: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if out.Len() > maxVmlinux {
		return nil, fmt.Errorf("kernel larger than %d MiB uncompressed: %w", maxVmlinux>>20, errdefs.ErrInvalidArgument)
	}
	if uint32(out.Len()) != size {
		return nil, fmt.Errorf("kernel decompressed to %d bytes, the bzImage says %d: %w", out.Len(), size, errdefs.ErrInvalidArgument)
	}
	return out.Bytes(), nil
}

// checkELF checks that b is what Firecracker loads: a 64-bit x86-64 ELF
// executable with loadable segments.
func checkELF(b []byte) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("decompressed kernel is not ELF: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC {
		return fmt.Errorf("decompressed kernel is ELF %v %v %v, want a 64-bit x86-64 executable: %w", f.Class, f.Machine, f.Type, errdefs.ErrInvalidArgument)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			return nil
		}
	}
	return fmt.Errorf("decompressed kernel has no loadable segment: %w", errdefs.ErrInvalidArgument)
}
