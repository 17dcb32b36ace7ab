package api

import (
	"net/http"
	"regexp"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

var tenantNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_\-]{0,62}$`)

func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.CreateTenantRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if !tenantNameRE.MatchString(req.Name) {
		return invalid(map[string]string{"name": "1-63 characters of a-z, 0-9, _ and -, starting with a letter or digit"})
	}
	t := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: req.Name, Quota: s.cfg.DefaultQuota, CreatedAt: time.Now().UTC()}
	if err := s.auth.CreateTenant(r.Context(), t); err != nil {
		if errdefs.ClassOf(err) == errdefs.ErrConflict {
			err = errdefs.New(errdefs.ErrConflict, "tenant %q exists", req.Name).WithCause(err)
		}
		return err
	}
	s.log(r).Info("tenant created", "tenant", t.ID, "name", t.Name)
	writeJSON(w, http.StatusCreated, apiv1.TenantResponse{Tenant: apiv1.Tenant{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt}})
	return nil
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.CreateKeyRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	name := r.PathValue("name")
	t, err := s.auth.TenantByName(r.Context(), name)
	if err != nil {
		return notFoundAs(err, "tenant", name)
	}
	secret, key, err := s.auth.CreateKeyFormat(r.Context(), t.ID, req.Admin, req.Format)
	if err != nil {
		return err
	}
	created := key.CreatedAt
	if created.IsZero() {
		created = time.Now().UTC()
	}
	writeJSON(w, http.StatusCreated, apiv1.KeyResponse{ID: key.ID, Tenant: t.Name, Key: secret, Admin: key.Admin, CreatedAt: created.UTC()})
	return nil
}

func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !validID(id, store.PrefixAPIKey) {
		return errdefs.New(errdefs.ErrNotFound, "key %q not found", id)
	}
	if err := s.auth.RevokeKey(r.Context(), id); err != nil {
		return notFoundAs(err, "key", id)
	}
	s.log(r).Info("api key revoked", "key", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
