package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/space-sandbox/space/internal/errdefs"
)

const mib = 1 << 20

// MakeExt4 writes an ext4 image of sizeBytes at out holding the tree under
// staging (mkfs.ext4 -d: no loop device, no mount). seed makes the file
// system UUID and directory hash seed follow the inputs. Ownership and modes
// are taken from staging as they are.
func MakeExt4(ctx context.Context, staging, out string, sizeBytes int64, seed string) error {
	return makeExt4(ctx, staging, out, sizeBytes, seed, 0)
}

// makeExt4 is MakeExt4 with an inode count (0: mkfs.ext4's default ratio,
// which a tree of many small files can exhaust).
func makeExt4(ctx context.Context, staging, out string, sizeBytes int64, seed string, inodes int64) error {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return fmt.Errorf("template: mkfs.ext4 not found (package e2fsprogs; run `make setup`): %w", errdefs.ErrFailedPrecondition)
	}
	f, err := os.OpenFile(out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("template: create image: %v: %w", err, errdefs.ErrInternal)
	}
	err = f.Truncate(sizeBytes) // sparse: only written blocks take space
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("template: size image: %v: %w", err, errdefs.ErrInternal)
	}
	uuid := uuidFrom(seed)
	args := []string{"-q", "-F", "-b", "4096", "-m", "0",
		"-L", "space-root", "-U", uuid,
		"-E", "hash_seed=" + uuid + ",root_owner=0:0"}
	if inodes > 0 {
		args = append(args, "-N", fmt.Sprint(inodes))
	}
	cmd := exec.CommandContext(ctx, mkfs, append(args, "-d", staging, out)...)
	cmd.Env = append(os.Environ(), "E2FSPROGS_FAKE_TIME=1", "SOURCE_DATE_EPOCH=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("template: mkfs.ext4: %w", errdefs.ErrCancelled)
		}
		return fmt.Errorf("template: mkfs.ext4: %v: %s: %w", err, b, errdefs.ErrInternal)
	}
	return nil
}

// uuidFrom derives an RFC 4122-shaped UUID from seed.
func uuidFrom(seed string) string {
	h := sha256.Sum256([]byte("space-ext4-uuid\n" + seed))
	h[6] = h[6]&0x0f | 0x40
	h[8] = h[8]&0x3f | 0x80
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// treeSize is the bytes the files under dir need, rounded up to 4 KiB blocks,
// plus one block per entry for inodes and directories.
func treeSize(dir string) (int64, error) {
	total, _, err := treeUsage(dir)
	return total, err
}

// treeUsage is treeSize and the number of entries.
func treeUsage(dir string) (total, entries int64, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entries++
		total += 4096
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += (fi.Size() + 4095) &^ 4095
		}
		return nil
	})
	return total, entries, err
}

// imageSize picks the image size: want, grown to fit content with headroom
// when content would not fit, rounded to whole MiB.
func imageSize(content, want int64) int64 {
	need := content + content/4 + 32*mib // ext4 metadata and journal, plus room to write
	if want < need {
		want = need
	}
	return (want + mib - 1) / mib * mib
}

// imageDigest is "sha256:<hex>" over the image bytes and the defaults.
func imageDigest(ctx context.Context, image string, d Defaults) (string, error) {
	f, err := os.Open(image)
	if err != nil {
		return "", fmt.Errorf("template: open image: %v: %w", err, errdefs.ErrInternal)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("template: hash image: %w", errdefs.ErrCancelled)
		}
		return "", fmt.Errorf("template: hash image: %v: %w", err, errdefs.ErrInternal)
	}
	b, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("template: encode defaults: %v: %w", err, errdefs.ErrInternal)
	}
	h.Write(b)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops a long copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
