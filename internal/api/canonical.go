package api

import (
	"net/http"
	"path"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
)

// canonicalPaths answers a request whose path is not canonical (an empty
// segment, "." or "..") with the API's JSON error, where the mux would
// answer a redirect of its own without a body: a client (or a fuzzer) that
// writes /v1/sandboxes/x/ports//proxy/ learns what is wrong.
func (s *Server) canonicalPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if strings.HasPrefix(p, "/v1/") {
			clean := path.Clean(p)
			if strings.HasSuffix(p, "/") && clean != "/" {
				clean += "/"
			}
			if clean != p {
				s.writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "the path %q is not canonical (empty, . or .. segments)", p))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
