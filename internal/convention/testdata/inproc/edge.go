// Package inproc is a deliberate violation of TestE2BCallsNoV1InProcess:
// an edge that answers a call by making a request of /v1 in-process.
package inproc

import (
	"net/http"
	"net/http/httptest"
)

type edge struct{ v1 http.Handler }

// ServeHTTP passes what is not its own on: allowed.
func (e *edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.v1.ServeHTTP(w, r)
	go func() { e.v1.ServeHTTP(w, r.WithContext(r.Context())) }()
}

// get asks /v1 in-process: a violation (the import, and the request of
// its own making).
func (e *edge) get(id string) int {
	rec := httptest.NewRecorder()
	req, _ := http.NewRequest("GET", "/v1/sandboxes/"+id, nil)
	e.v1.ServeHTTP(rec, req)
	return rec.Code
}
