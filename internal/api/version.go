package api

import (
	"net/http"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/version"
)

// getVersion says which build serves. It needs no key (like /healthz):
// clients check compatibility before they have one.
func (s *Server) getVersion(w http.ResponseWriter, r *http.Request) error {
	v := version.Get()
	writeJSON(w, http.StatusOK, apiv1.Version{Version: v.Version, Commit: v.Commit, GoVersion: v.GoVersion, API: v.API})
	return nil
}
