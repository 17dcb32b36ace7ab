package e2b

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// serveFilesystem serves filesystem.Filesystem on /v1 files (stat and
// listings from files/list, removal by DELETE) and short root commands
// through /v1 exec for what /v1 has no route for (mkdir, mv).
func (h *Handler) serveFilesystem(w http.ResponseWriter, r *http.Request, c *envdCall, method string) {
	ctx := r.Context()
	var (
		out any
		err error
	)
	switch method {
	case "Stat":
		var req pathRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		var ent entryInfo
		ent, err = h.stat(ctx, c, c.resolve(req.Path))
		out = entryResponse{Entry: ent}
	case "ListDir":
		var req listDirRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		depth := max(int(req.Depth), 1)
		ents := []entryInfo{}
		err = h.listDir(ctx, c, c.resolve(req.Path), depth, &ents)
		out = listDirResponse{Entries: ents}
	case "MakeDir":
		var req pathRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		p := c.resolve(req.Path)
		if _, serr := h.stat(ctx, c, p); serr == nil {
			err = rpcErrorf("already_exists", "%s already exists", p)
			break
		}
		if err = h.run(ctx, c, []string{"mkdir", "-p", "--", p}); err == nil && c.user != "root" {
			err = h.run(ctx, c, []string{"chown", c.user + ":", p})
		}
		var ent entryInfo
		if err == nil {
			ent, err = h.stat(ctx, c, p)
		}
		out = entryResponse{Entry: ent}
	case "Move":
		var req moveRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		src, dst := c.resolve(req.Source), c.resolve(req.Destination)
		if _, err = h.stat(ctx, c, src); err != nil {
			break
		}
		var ent entryInfo
		if err = h.run(ctx, c, []string{"mv", "-f", "--", src, dst}); err == nil {
			ent, err = h.stat(ctx, c, dst)
		}
		out = entryResponse{Entry: ent}
	case "Remove":
		var req pathRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		res := h.call(ctx, c.who, "DELETE", c.sandboxPath("/files"), url.Values{"path": {c.resolve(req.Path)}, "recursive": {"true"}}, nil, "")
		if !res.ok() {
			err = res.err()
		}
		out = struct{}{}
	default:
		writeUnaryError(w, rpcErrorf("unimplemented", "filesystem.Filesystem/%s is not supported by SPACE", method))
		return
	}
	if err != nil {
		var ef *execFailed
		if errors.As(err, &ef) {
			err = rpcErrorf("invalid_argument", "%s", ef.stderr)
		}
		writeUnaryError(w, asRPCError(err))
		return
	}
	writeUnary(w, out)
}

func (h *Handler) list(ctx context.Context, c *envdCall, dir string) ([]apiv1.FileInfo, error) {
	var infos []apiv1.FileInfo
	_, err := h.callJSON(ctx, c.who, "GET", c.sandboxPath("/files/list"), url.Values{"path": {dir}}, nil, &infos)
	return infos, err
}

// stat finds p in its parent's listing; "/" is a directory.
func (h *Handler) stat(ctx context.Context, c *envdCall, p string) (entryInfo, error) {
	if p == "/" {
		return entryInfo{Name: "/", Path: "/", Type: "FILE_TYPE_DIRECTORY", Size: "0",
			Mode: uint32(fs.ModeDir | 0o755), Permissions: (fs.ModeDir | 0o755).String()}, nil
	}
	infos, err := h.list(ctx, c, path.Dir(p))
	if err != nil {
		return entryInfo{}, err
	}
	for _, fi := range infos {
		if fi.Name == path.Base(p) {
			return toEntry(path.Dir(p), fi), nil
		}
	}
	return entryInfo{}, rpcErrorf("not_found", "%s not found", p)
}

func (h *Handler) listDir(ctx context.Context, c *envdCall, dir string, depth int, out *[]entryInfo) error {
	infos, err := h.list(ctx, c, dir)
	if err != nil {
		return err
	}
	for _, fi := range infos {
		ent := toEntry(dir, fi)
		*out = append(*out, ent)
		if depth > 1 && fi.Type == "dir" {
			if err := h.listDir(ctx, c, ent.Path, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

func toEntry(dir string, fi apiv1.FileInfo) entryInfo {
	perm, _ := strconv.ParseUint(fi.Mode, 8, 32)
	mode := fs.FileMode(perm) & fs.ModePerm
	typ := "FILE_TYPE_FILE"
	switch fi.Type {
	case "dir":
		typ, mode = "FILE_TYPE_DIRECTORY", mode|fs.ModeDir
	case "symlink":
		typ, mode = "FILE_TYPE_SYMLINK", mode|fs.ModeSymlink
	}
	ent := entryInfo{
		Name: fi.Name, Type: typ, Path: path.Join(dir, fi.Name), Size: strconv.FormatInt(fi.Size, 10),
		Mode: uint32(mode), Permissions: mode.String(),
	}
	if !fi.MTime.IsZero() {
		ent.ModifiedTime = fi.MTime.UTC().Format(time.RFC3339Nano)
	}
	return ent
}
