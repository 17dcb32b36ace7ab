package api

import (
	"net/http"
	"sort"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/secrets"
)

// secretsService is the secrets store, or the 503 of a server without one.
func (s *Server) secretsService() (*secrets.Service, error) {
	if s.secrets == nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, "secrets are not configured on this server")
	}
	return s.secrets, nil
}

func toSecret(i secrets.Info) apiv1.Secret {
	return apiv1.Secret{Name: i.Name, CreatedAt: i.CreatedAt.UTC(), UpdatedAt: i.UpdatedAt.UTC()}
}

// putSecret stores a secret's value (201 when new, 200 when replaced). The
// answer and every error name the secret, never its value.
func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.secretsService()
	if err != nil {
		return err
	}
	var req apiv1.PutSecretRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	name := r.PathValue("name")
	if !secrets.ValidName(name) {
		return invalid(map[string]string{"name": "1-128 characters of letters, digits and _ . - (not starting with . or -)"})
	}
	info, created, err := svc.Put(r.Context(), principal(r.Context()).TenantID, name, req.Value)
	req.Value = ""
	if err != nil {
		return fieldsOf(err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, toSecret(info))
	return nil
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.secretsService()
	if err != nil {
		return err
	}
	infos, err := svc.List(r.Context(), principal(r.Context()).TenantID)
	if err != nil {
		return err
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	page, next, err := pageInMemory(r, infos, func(i secrets.Info) string { return i.Name })
	if err != nil {
		return err
	}
	out := apiv1.SecretList{Secrets: []apiv1.Secret{}, NextPageToken: next}
	for _, i := range page {
		out.Secrets = append(out.Secrets, toSecret(i))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.secretsService()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := svc.Delete(r.Context(), principal(r.Context()).TenantID, name); err != nil {
		return notFoundAs(err, "secret", name)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
