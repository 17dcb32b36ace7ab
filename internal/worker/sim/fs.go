package sim

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// node is one file or directory of a simulated guest. A file's data is
// never changed in place (a write replaces it), so copies of a filesystem
// share it.
type node struct {
	dir   bool
	data  []byte
	mode  uint32
	mtime time.Time
}

// memFS is a guest's filesystem: clean absolute paths to nodes, the bytes
// its files hold and the bound on them. Its owner serialises calls.
type memFS struct {
	nodes map[string]*node
	used  int64
	limit int64
}

func newFS(limit int64) *memFS {
	fs := &memFS{nodes: map[string]*node{}, limit: limit}
	now := time.Now()
	for _, d := range []string{"/", "/tmp", "/root", "/home", "/home/user", "/etc"} {
		fs.nodes[d] = &node{dir: true, mode: 0o755, mtime: now}
	}
	return fs
}

// clone is a copy sharing file data (a checkpoint or a branch).
func (fs *memFS) clone() *memFS {
	c := &memFS{nodes: make(map[string]*node, len(fs.nodes)), used: fs.used, limit: fs.limit}
	for p, n := range fs.nodes {
		cp := *n
		c.nodes[p] = &cp
	}
	return c
}

// clean checks p is absolute and returns it cleaned.
func clean(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "path %q is not absolute", p)
	}
	return path.Clean(p), nil
}

func (fs *memFS) info(p string, n *node) agentproto.FileInfo {
	fi := agentproto.FileInfo{Name: path.Base(p), Type: agentproto.FileTypeFile, Size: int64(len(n.data)), Mode: n.mode, MTime: n.mtime}
	if n.dir {
		fi.Type, fi.Size = agentproto.FileTypeDir, 0
	}
	return fi
}

func (fs *memFS) lookup(p string) (string, *node, error) {
	p, err := clean(p)
	if err != nil {
		return "", nil, err
	}
	n, ok := fs.nodes[p]
	if !ok {
		return "", nil, errdefs.New(errdefs.ErrNotFound, "%s: no such file or directory", p)
	}
	return p, n, nil
}

func (fs *memFS) stat(p string) (agentproto.FileInfo, error) {
	p, n, err := fs.lookup(p)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	return fs.info(p, n), nil
}

func (fs *memFS) read(p string) ([]byte, agentproto.FileInfo, error) {
	p, n, err := fs.lookup(p)
	if err != nil {
		return nil, agentproto.FileInfo{}, err
	}
	if n.dir {
		return nil, agentproto.FileInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "%s is a directory", p)
	}
	return n.data, fs.info(p, n), nil
}

// mkdirs makes p and its parents directories.
func (fs *memFS) mkdirs(p string) error {
	if n, ok := fs.nodes[p]; ok {
		if !n.dir {
			return errdefs.New(errdefs.ErrInvalidArgument, "%s is not a directory", p)
		}
		return nil
	}
	if p != "/" {
		if err := fs.mkdirs(path.Dir(p)); err != nil {
			return err
		}
	}
	fs.nodes[p] = &node{dir: true, mode: 0o755, mtime: time.Now()}
	return nil
}

// write replaces the file at p with data (parents made), within the limit.
func (fs *memFS) write(p string, mode uint32, data []byte) (agentproto.FileInfo, error) {
	p, err := clean(p)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	if p == "/" {
		return agentproto.FileInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "cannot write /")
	}
	old, exists := fs.nodes[p]
	if exists && old.dir {
		return agentproto.FileInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "%s is a directory", p)
	}
	grow := int64(len(data))
	if exists {
		grow -= int64(len(old.data))
	}
	if fs.used+grow > fs.limit {
		return agentproto.FileInfo{}, errdefs.New(errdefs.ErrResourceExhausted, "no space left on the guest's disk")
	}
	if err := fs.mkdirs(path.Dir(p)); err != nil {
		return agentproto.FileInfo{}, err
	}
	if mode == 0 {
		mode = 0o644
	}
	n := &node{data: data, mode: mode & 0o7777, mtime: time.Now()}
	fs.nodes[p] = n
	fs.used += grow
	return fs.info(p, n), nil
}

// children are the paths directly under dir, sorted.
func (fs *memFS) children(dir string) []string {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var out []string
	for p := range fs.nodes {
		if p != dir && strings.HasPrefix(p, prefix) && !strings.Contains(p[len(prefix):], "/") {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (fs *memFS) listDir(p string) ([]agentproto.FileInfo, error) {
	p, n, err := fs.lookup(p)
	if err != nil {
		return nil, err
	}
	if !n.dir {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "%s is not a directory", p)
	}
	kids := fs.children(p)
	out := make([]agentproto.FileInfo, 0, len(kids))
	for _, c := range kids {
		out = append(out, fs.info(c, fs.nodes[c]))
	}
	return out, nil
}

func (fs *memFS) remove(p string, recursive bool) error {
	p, n, err := fs.lookup(p)
	if err != nil {
		return err
	}
	if p == "/" {
		return errdefs.New(errdefs.ErrInvalidArgument, "cannot delete /")
	}
	if n.dir && len(fs.children(p)) > 0 && !recursive {
		return errdefs.New(errdefs.ErrFailedPrecondition, "%s is a non-empty directory", p)
	}
	prefix := p + "/"
	for q, m := range fs.nodes {
		if q == p || strings.HasPrefix(q, prefix) {
			fs.used -= int64(len(m.data))
			delete(fs.nodes, q)
		}
	}
	return nil
}

// tarOut is the tree under dir as a tar archive, names relative to dir.
func (fs *memFS) tarOut(dir string) ([]byte, error) {
	dir, n, err := fs.lookup(dir)
	if err != nil {
		return nil, err
	}
	if !n.dir {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "%s is not a directory", dir)
	}
	var paths []string
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for p := range fs.nodes {
		if strings.HasPrefix(p, prefix) {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		m := fs.nodes[p]
		h := &tar.Header{Name: p[len(prefix):], Mode: int64(m.mode), ModTime: m.mtime, Typeflag: tar.TypeReg, Size: int64(len(m.data))}
		if m.dir {
			h.Name, h.Typeflag, h.Size = h.Name+"/", tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(m.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarIn unpacks archive under dir; entries that would leave dir, and
// kinds other than files and directories, are refused.
func (fs *memFS) tarIn(dir string, archive io.Reader) error {
	dir, err := clean(dir)
	if err != nil {
		return err
	}
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "bad tar archive: %v", err)
		}
		target := path.Join(dir, h.Name)
		if target != dir && !strings.HasPrefix(target, strings.TrimSuffix(dir, "/")+"/") {
			return errdefs.New(errdefs.ErrInvalidArgument, "tar entry %q leaves %s", h.Name, dir)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := fs.mkdirs(target); err != nil {
				return err
			}
		case tar.TypeReg:
			if h.Size > fs.limit-fs.used {
				return errdefs.New(errdefs.ErrResourceExhausted, "no space left on the guest's disk")
			}
			data, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil {
				return errdefs.New(errdefs.ErrInvalidArgument, "bad tar archive: %v", err)
			}
			if _, err := fs.write(target, uint32(h.Mode), data); err != nil {
				return err
			}
		default:
			return errdefs.New(errdefs.ErrInvalidArgument, "tar entry %q: %s", h.Name, fmt.Sprintf("type %q is not simulated", h.Typeflag))
		}
	}
}
