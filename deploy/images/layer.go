package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"
)

// epoch is the one timestamp every layer entry carries: zero, so a layer's
// bytes depend on file contents and metadata only, never on when it was built.
var epoch = time.Unix(0, 0).UTC()

// entry is one file of a layer: where it lands in the image and where its
// bytes and metadata come from on this host.
type entry struct {
	name string // path in the image, relative, no leading or trailing slash
	src  string // host path (empty for a directory the layer makes up)
	// mode, uid and gid override the source's when override is set (our
	// binaries, made-up parent directories); else they come from lstat.
	override bool
	mode     fs.FileMode
	uid, gid int
}

// layerSpec lists what goes into one layer: whole host trees (mapped under
// a directory of the image) and single files.
type layerSpec struct {
	trees []tree
	files []entry
}

// tree is a host directory copied, with its metadata, under dest.
type tree struct {
	src, dest string
	// skipChildren names directories (relative to src) kept empty: the
	// container runtime mounts /dev, /proc, /sys and /run itself.
	skipChildren []string
}

// layerInfo is what a written layer is known by: the digest of its gzip
// bytes (the blob) and of its tar (the diff id), and its size.
type layerInfo struct {
	Digest string `json:"digest"`
	DiffID string `json:"diff_id"`
	Size   int64  `json:"size"`
}

// collect expands the spec into entries sorted so that every directory
// comes before what it holds and siblings are in byte order: the same order
// `tar --sort=name` gives, independent of readdir.
func (s layerSpec) collect() ([]entry, error) {
	byName := map[string]entry{}
	add := func(e entry) error {
		if e.name == "" || e.name == "." {
			return nil
		}
		if _, dup := byName[e.name]; dup {
			return fmt.Errorf("layer: %s added twice", e.name)
		}
		byName[e.name] = e
		return nil
	}
	for _, t := range s.trees {
		dest := strings.Trim(t.dest, "/")
		skip := map[string]bool{}
		for _, d := range t.skipChildren {
			skip[strings.Trim(d, "/")] = true
		}
		err := filepath.WalkDir(t.src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(t.src, p)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if d.Type()&fs.ModeSocket != 0 {
				return nil
			}
			if err := add(entry{name: path.Join(dest, rel), src: p}); err != nil {
				return err
			}
			if d.IsDir() && skip[rel] {
				return filepath.SkipDir
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("layer: walk %s: %w", t.src, err)
		}
	}
	for _, f := range s.files {
		f.name = strings.Trim(f.name, "/")
		if err := add(f); err != nil {
			return nil, err
		}
	}
	// Parent directories nobody listed: root-owned 0755, as in Debian.
	for name := range byName {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if _, ok := byName[dir]; !ok {
				byName[dir] = entry{name: dir, override: true, mode: fs.ModeDir | 0o755}
			}
		}
	}
	out := make([]entry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return pathLess(out[i].name, out[j].name) })
	return out, nil
}

// pathLess orders paths component by component: "a" < "a/b" < "a-c".
func pathLess(a, b string) bool {
	return strings.ReplaceAll(a, "/", "\x00") < strings.ReplaceAll(b, "/", "\x00")
}

// writeLayer writes the spec as a gzip-compressed tar to dst and returns its
// digests. Same spec and same host files give the same bytes: sorted
// entries, zero timestamps, numeric owners without names, hard links to the
// first name in order, extended attributes (file capabilities) kept.
func writeLayer(spec layerSpec, dst string) (layerInfo, error) {
	entries, err := spec.collect()
	if err != nil {
		return layerInfo{}, err
	}
	f, err := os.Create(dst)
	if err != nil {
		return layerInfo{}, fmt.Errorf("layer: %w", err)
	}
	defer f.Close()
	blobSum, tarSum := sha256.New(), sha256.New()
	counter := &countWriter{w: io.MultiWriter(f, blobSum)}
	zw, err := gzip.NewWriterLevel(counter, gzip.DefaultCompression)
	if err != nil {
		return layerInfo{}, err
	}
	tw := tar.NewWriter(io.MultiWriter(zw, tarSum))
	links := map[[2]uint64]string{}
	for _, e := range entries {
		if err := writeEntry(tw, e, links); err != nil {
			return layerInfo{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return layerInfo{}, fmt.Errorf("layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return layerInfo{}, fmt.Errorf("layer: %w", err)
	}
	if err := f.Close(); err != nil {
		return layerInfo{}, fmt.Errorf("layer: %w", err)
	}
	return layerInfo{Digest: sum(blobSum), DiffID: sum(tarSum), Size: counter.n}, nil
}

func writeEntry(tw *tar.Writer, e entry, links map[[2]uint64]string) error {
	hdr := &tar.Header{Name: e.name, ModTime: epoch, Format: tar.FormatPAX}
	if e.src == "" { // a directory the layer made up
		hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, e.name+"/", tarMode(e.mode)
		return tw.WriteHeader(hdr)
	}
	var st unix.Stat_t
	if err := unix.Lstat(e.src, &st); err != nil {
		return fmt.Errorf("layer: %s: %w", e.src, err)
	}
	hdr.Mode = int64(st.Mode & 0o7777)
	hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	if e.override {
		hdr.Mode, hdr.Uid, hdr.Gid = tarMode(e.mode), e.uid, e.gid
	}
	xattrs, err := readXattrs(e.src)
	if err != nil {
		return err
	}
	for k, v := range xattrs {
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords["SCHILY.xattr."+k] = v
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, e.name+"/"
	case syscall.S_IFLNK:
		target, err := os.Readlink(e.src)
		if err != nil {
			return fmt.Errorf("layer: %w", err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	case syscall.S_IFCHR, syscall.S_IFBLK:
		hdr.Typeflag = tar.TypeChar
		if st.Mode&syscall.S_IFMT == syscall.S_IFBLK {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	case syscall.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
	case syscall.S_IFREG:
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := links[key]; ok && st.Nlink > 1 {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			break
		}
		links[key] = e.name
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("layer: %s: %w", e.name, err)
		}
		return copyFile(tw, e.src, st.Size)
	default:
		return fmt.Errorf("layer: %s: unsupported file type %#o", e.src, st.Mode&syscall.S_IFMT)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("layer: %s: %w", e.name, err)
	}
	return nil
}

// tarMode is a Go file mode as tar's (and chmod's) bits.
func tarMode(m fs.FileMode) int64 {
	out := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		out |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		out |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		out |= 0o1000
	}
	return out
}

func copyFile(w io.Writer, src string, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	defer f.Close()
	if n, err := io.Copy(w, io.LimitReader(f, size)); err != nil || n != size {
		return fmt.Errorf("layer: %s changed while it was read (%d of %d bytes): %v", src, n, size, err)
	}
	return nil
}

// readXattrs returns the extended attributes of p (not following a
// symlink), e.g. security.capability on ping.
func readXattrs(p string) (map[string]string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err == unix.ENOTSUP || n == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("layer: xattrs of %s: %w", p, err)
	}
	out := map[string]string{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		val := make([]byte, 4096)
		m, err := unix.Lgetxattr(p, name, val)
		if err != nil {
			return nil, fmt.Errorf("layer: xattr %s of %s: %w", name, p, err)
		}
		out[name] = string(val[:m])
	}
	return out, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func sum(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// saveInfo and loadInfo keep a cached layer's digests beside it, so a warm
// build does not read the layer again.
func saveInfo(p string, li layerInfo) error {
	b, err := json.Marshal(li)
	if err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

func loadInfo(p string) (layerInfo, error) {
	var li layerInfo
	b, err := os.ReadFile(p)
	if err != nil {
		return li, err
	}
	err = json.Unmarshal(b, &li)
	return li, err
}
