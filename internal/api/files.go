package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// maxPathLen is Linux's PATH_MAX: the guest could not open a longer path.
const maxPathLen = 4096

// filePath validates ?path= (absolute, no NUL, at most PATH_MAX) and
// ?format= and returns the cleaned path and whether a tar is asked for.
func filePath(q url.Values) (string, bool, error) {
	p := q.Get("path")
	f := map[string]string{}
	switch {
	case p == "":
		f["path"] = "required"
	case !noNUL(f, "path", p):
	case !path.IsAbs(p):
		f["path"] = "must be an absolute path"
	case len(p) > maxPathLen:
		f["path"] = fmt.Sprintf("must be at most %d bytes", maxPathLen)
	}
	format := q.Get("format")
	if format != "" && format != "tar" && format != "raw" {
		f["format"] = `must be "raw" or "tar"`
	}
	if len(f) > 0 {
		return "", false, invalid(f)
	}
	return path.Clean(p), format == "tar", nil
}

// fileTarget validates the file request (filePath) and returns the running
// sandbox's agent.
func (s *Server) fileTarget(r *http.Request) (worker.Guest, string, bool, error) {
	p, tar, err := filePath(r.URL.Query())
	if err != nil {
		return nil, "", false, err
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return nil, "", false, err
	}
	if err := sandbox.RequireState(sb, store.SandboxRunning); err != nil {
		return nil, "", false, err
	}
	s.svc.Touch(r.Context(), sb.ID)
	ag, err := s.svc.Agent(r.Context(), sb.ID)
	return ag, p, tar, err
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request) error {
	var mode uint64 = 0o644
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o7777 {
			return invalid(map[string]string{"mode": `must be octal permission bits such as "0644"`})
		}
		mode = m
	}
	ag, p, tar, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	if tar {
		if err := ag.TarIn(r.Context(), p, r.Body); err != nil {
			return s.uploadError(err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	// The announced length lets the agent tell a body cut short (a client
	// gone, a limit hit) from a complete one: it then keeps nothing.
	info, err := ag.WriteFile(r.Context(), p, uint32(mode), r.ContentLength, r.Body)
	if err != nil {
		return s.uploadError(err)
	}
	info.Name = path.Base(p)
	writeJSON(w, http.StatusOK, toFileInfo(info))
	return nil
}

// uploadError prefers the body limit's 413 over whatever the agent made of
// the cut-off stream.
func (s *Server) uploadError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return bodyError(mbe)
	}
	return err
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) error {
	ag, p, tar, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	var body io.ReadCloser
	if tar {
		body, err = ag.TarOut(r.Context(), p)
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/x-tar")
	} else {
		rc, info, err := ag.ReadFile(r.Context(), p)
		if err != nil {
			return err
		}
		body = rc
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-File-Mode", toFileInfo(info).Mode)
		if !info.MTime.IsZero() {
			w.Header().Set("Last-Modified", info.MTime.UTC().Format(http.TimeFormat))
		}
	}
	defer body.Close()
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil {
		// Headers are gone; a cut-off body is all a client can be told.
		s.log(r).Warn("file download interrupted", "err", err)
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	ag, p, _, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	entries, err := ag.ListDir(r.Context(), p)
	if err != nil {
		return err
	}
	out := []apiv1.FileInfo{}
	for _, e := range entries {
		out = append(out, toFileInfo(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) error {
	rec := r.URL.Query().Get("recursive")
	if rec != "" && rec != "true" && rec != "false" {
		return invalid(map[string]string{"recursive": "must be true or false"})
	}
	ag, p, _, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	if p == "/" {
		return errdefs.New(errdefs.ErrInvalidArgument, "refusing to delete /").
			WithDetails(map[string]any{"fields": map[string]string{"path": "must not be /"}})
	}
	if err := ag.Delete(r.Context(), p, rec == "true"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
