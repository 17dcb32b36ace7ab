package api

import (
	"net/http"
	"regexp"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
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

// maxQuota bounds each quota field: the stores keep them as 32-bit integers.
const maxQuota = 1<<31 - 1

// listTenants is GET /v1/admin/tenants.
func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.auth.ListTenants(r.Context())
	if err != nil {
		return err
	}
	out := apiv1.TenantList{Tenants: make([]apiv1.TenantInfo, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, toTenantInfo(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func toTenantInfo(t auth.TenantInfo) apiv1.TenantInfo {
	return apiv1.TenantInfo{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt.UTC(), Sandboxes: t.Usage.Sandboxes,
		Quotas: apiv1.TenantQuotas{Sandboxes: t.Quota.MaxSandboxes, VCPUs: t.Quota.MaxVCPUs, MemoryMiB: t.Quota.MaxMemoryMiB}}
}

// listKeys is GET /v1/admin/tenants/{name}/keys: ids and formats, never a
// key or its hash.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	t, err := s.auth.TenantByName(r.Context(), name)
	if err != nil {
		return notFoundAs(err, "tenant", name)
	}
	ks, err := s.auth.ListKeys(r.Context(), t.ID)
	if err != nil {
		return err
	}
	out := apiv1.KeyList{Keys: make([]apiv1.KeyInfo, 0, len(ks))}
	for _, k := range ks {
		ki := apiv1.KeyInfo{ID: k.ID, Format: auth.KeyFormat(k), Admin: k.Admin, CreatedAt: k.CreatedAt.UTC()}
		if k.RevokedAt != nil {
			at := k.RevokedAt.UTC()
			ki.RevokedAt = &at
		}
		out.Keys = append(out.Keys, ki)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// setQuotas is PUT /v1/admin/tenants/{name}/quotas: the fields given
// replace the tenant's quotas, the others stay.
func (s *Server) setQuotas(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.SetQuotasRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	bad := map[string]string{}
	for field, v := range map[string]*int{"sandboxes": req.Sandboxes, "vcpus": req.VCPUs, "memory_mib": req.MemoryMiB} {
		if v != nil && (*v < 0 || *v > maxQuota) {
			bad[field] = "0 (unlimited) to 2147483647"
		}
	}
	if len(bad) > 0 {
		return invalid(bad)
	}
	name := r.PathValue("name")
	t, err := s.auth.TenantByName(r.Context(), name)
	if err != nil {
		return notFoundAs(err, "tenant", name)
	}
	ti, err := s.auth.UpdateQuota(r.Context(), t.ID, func(q *store.Quota) {
		set := func(dst *int, v *int) {
			if v != nil {
				*dst = *v
			}
		}
		set(&q.MaxSandboxes, req.Sandboxes)
		set(&q.MaxVCPUs, req.VCPUs)
		set(&q.MaxMemoryMiB, req.MemoryMiB)
	})
	if err != nil {
		return notFoundAs(err, "tenant", name)
	}
	writeJSON(w, http.StatusOK, apiv1.TenantInfoResponse{Tenant: toTenantInfo(*ti)})
	return nil
}
