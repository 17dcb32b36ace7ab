package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

type recorder struct {
	hdr    http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{hdr: http.Header{}} }

func (r *recorder) Header() http.Header { return r.hdr }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.body.Write(b)
}

func mustRequest(t *testing.T, method, target string) *http.Request {
	t.Helper()
	return httptest.NewRequest(method, target, nil)
}

// pollPause spaces out polls of a state that has no change notification.
func pollPause() { time.Sleep(5 * time.Millisecond) }

func execShell(sh string) apiv1.ExecRequest {
	return apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{Shell: sh}}
}
