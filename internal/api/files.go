package api

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
)

// filePath validates ?path= (sandbox.CleanPath) and ?format= and returns
// the cleaned path and whether a tar is asked for.
func filePath(q url.Values) (string, bool, error) {
	f := map[string]string{}
	p, err := sandbox.CleanPath(q.Get("path"))
	if err != nil {
		sandbox.MergeFields(err, "path", f)
	}
	format := q.Get("format")
	if format != "" && format != "tar" && format != "raw" {
		f["format"] = `must be "raw" or "tar"`
	}
	if len(f) > 0 {
		return "", false, invalid(f)
	}
	return p, format == "tar", nil
}

// fileTarget validates the file request (filePath) and loads the caller's
// sandbox; the Service's file calls check that it runs.
func (s *Server) fileTarget(r *http.Request) (*store.Sandbox, string, bool, error) {
	p, tar, err := filePath(r.URL.Query())
	if err != nil {
		return nil, "", false, err
	}
	sb, err := s.sandbox(r)
	return sb, p, tar, err
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
	sb, p, tar, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	if tar {
		if err := s.svc.TarIn(r.Context(), sb, p, r.Body); err != nil {
			return s.uploadError(err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	// The announced length lets the agent tell a body cut short (a client
	// gone, a limit hit) from a complete one: it then keeps nothing.
	info, err := s.svc.WriteFile(r.Context(), sb, p, uint32(mode), r.ContentLength, r.Body)
	if err != nil {
		return s.uploadError(err)
	}
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
	sb, p, tar, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	var body io.ReadCloser
	if tar {
		body, err = s.svc.TarOut(r.Context(), sb, p)
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/x-tar")
	} else {
		rc, info, err := s.svc.ReadFile(r.Context(), sb, p)
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
	sb, p, _, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	entries, err := s.svc.ListDir(r.Context(), sb, p)
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
	sb, p, _, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	if err := s.svc.DeleteFile(r.Context(), sb, p, rec == "true"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
