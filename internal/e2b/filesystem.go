package e2b

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/store"
)

// serveFilesystem serves filesystem.Filesystem on the Service's files
// (stat and listings from ListDir, removal by DeleteFile) and short root
// commands (Exec) for what has no file call (mkdir, mv).
func (h *Handler) serveFilesystem(w http.ResponseWriter, r *http.Request, c *envdCall, method string) {
	ctx := r.Context()
	var (
		out any
		err error
		sb  *store.Sandbox
	)
	if method == "Stat" || method == "ListDir" || method == "MakeDir" || method == "Move" || method == "Remove" {
		// The sandbox is read once per call; the call is logged as its method.
		start := time.Now()
		var p auth.Principal
		p, sb, err = h.load(ctx, c.who, c.sandbox, "")
		defer func() { h.audit(ctx, "filesystem "+method, p, c.sandbox, start, err) }()
		if err != nil {
			writeUnaryError(w, asRPCError(err))
			return
		}
	}
	switch method {
	case "Stat":
		var req pathRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		var ent entryInfo
		ent, err = h.stat(ctx, sb, c.resolve(req.Path))
		out = entryResponse{Entry: ent}
	case "ListDir":
		var req listDirRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		depth := max(int(req.Depth), 1)
		ents := []entryInfo{}
		err = h.listDir(ctx, sb, c.resolve(req.Path), depth, &ents)
		out = listDirResponse{Entries: ents}
	case "MakeDir":
		var req pathRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		p := c.resolve(req.Path)
		if _, serr := h.stat(ctx, sb, p); serr == nil {
			err = rpcErrorf("already_exists", "%s already exists", p)
			break
		}
		if err = h.run(ctx, sb, []string{"mkdir", "-p", "--", p}); err == nil && c.user != "root" {
			err = h.run(ctx, sb, []string{"chown", c.user + ":", p})
		}
		var ent entryInfo
		if err == nil {
			ent, err = h.stat(ctx, sb, p)
		}
		out = entryResponse{Entry: ent}
	case "Move":
		var req moveRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		src, dst := c.resolve(req.Source), c.resolve(req.Destination)
		if _, err = h.stat(ctx, sb, src); err != nil {
			break
		}
		var ent entryInfo
		if err = h.run(ctx, sb, []string{"mv", "-f", "--", src, dst}); err == nil {
			ent, err = h.stat(ctx, sb, dst)
		}
		out = entryResponse{Entry: ent}
	case "Remove":
		var req pathRequest
		if e := readUnary(r, &req); e != nil {
			writeUnaryError(w, e)
			return
		}
		err = h.sandboxes.DeleteFile(ctx, sb, c.resolve(req.Path), true)
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

// stat finds p in its parent's listing; "/" is a directory.
func (h *Handler) stat(ctx context.Context, sb *store.Sandbox, p string) (entryInfo, error) {
	if p == "/" {
		return entryInfo{Name: "/", Path: "/", Type: "FILE_TYPE_DIRECTORY", Size: "0",
			Mode: uint32(fs.ModeDir | 0o755), Permissions: (fs.ModeDir | 0o755).String()}, nil
	}
	infos, err := h.sandboxes.ListDir(ctx, sb, path.Dir(p))
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

func (h *Handler) listDir(ctx context.Context, sb *store.Sandbox, dir string, depth int, out *[]entryInfo) error {
	infos, err := h.sandboxes.ListDir(ctx, sb, dir)
	if err != nil {
		return err
	}
	for _, fi := range infos {
		ent := toEntry(dir, fi)
		*out = append(*out, ent)
		if depth > 1 && fi.Type == "dir" {
			if err := h.listDir(ctx, sb, ent.Path, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

func toEntry(dir string, fi agentproto.FileInfo) entryInfo {
	mode := fs.FileMode(fi.Mode) & fs.ModePerm
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
