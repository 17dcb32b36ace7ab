package api

import "net/http"

func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.openAPI())
}

func (s *Server) openAPI() map[string]any { return map[string]any{} }
