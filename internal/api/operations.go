package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// parseWait reads ?wait= as a Go duration ("30s") or whole seconds ("30").
func (s *Server) parseWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, err2 := strconv.Atoi(v)
		if err2 != nil {
			return 0, invalid(map[string]string{"wait": `must be a duration such as "30s"`})
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, invalid(map[string]string{"wait": "must not be negative"})
	}
	return min(d, s.cfg.MaxWait), nil
}

func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	wait, err := s.parseWait(r.URL.Query().Get("wait"))
	if err != nil {
		return err
	}
	if !validID(id, store.PrefixOperation) {
		return errdefs.New(errdefs.ErrNotFound, "operation %q not found", id)
	}
	op, err := s.ops.Wait(r.Context(), principal(r.Context()).TenantID, id, wait)
	if err != nil {
		return notFoundAs(err, "operation", id)
	}
	writeJSON(w, http.StatusOK, toOperation(op))
	return nil
}

func (s *Server) listOperations(w http.ResponseWriter, r *http.Request) error {
	pr, err := pageRequest(r)
	if err != nil {
		return err
	}
	page, err := s.svc.ListOperations(r.Context(), principal(r.Context()).TenantID, r.URL.Query().Get("target"), pr)
	if err != nil {
		return err
	}
	out := apiv1.OperationList{Operations: []apiv1.Operation{}, NextPageToken: page.NextPageToken}
	for _, op := range page.Items {
		out.Operations = append(out.Operations, toOperation(op))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) cancelOperation(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !validID(id, store.PrefixOperation) {
		return errdefs.New(errdefs.ErrNotFound, "operation %q not found", id)
	}
	op, err := s.ops.Cancel(r.Context(), principal(r.Context()).TenantID, id)
	if err != nil {
		return notFoundAs(err, "operation", id)
	}
	writeJSON(w, http.StatusOK, toOperation(op))
	return nil
}

// notFoundAs gives a store's not-found a public message naming the object.
func notFoundAs(err error, kind, id string) error {
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		return errdefs.New(errdefs.ErrNotFound, "%s %q not found", kind, id).WithCause(err)
	}
	return err
}
