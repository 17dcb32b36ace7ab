package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
)

// caller is who an in-process /v1 request acts as: a SPACE key (REST
// calls, checked by /v1 itself) or a principal this package authenticated
// (envd calls, by the sandbox's access token).
type caller struct {
	key       string
	principal *auth.Principal
}

func (c caller) apply(r *http.Request) *http.Request {
	if c.principal != nil {
		return r.WithContext(auth.WithPrincipal(r.Context(), *c.principal))
	}
	r.Header.Set("Authorization", "Bearer "+c.key)
	return r
}

// v1Response is a whole /v1 answer.
type v1Response struct {
	status int
	header http.Header
	body   []byte
}

func (r *v1Response) ok() bool { return r.status >= 200 && r.status < 300 }

// v1Error is a non-2xx /v1 answer as an error: its status and the
// contract's error body.
type v1Error struct {
	status     int
	code       string
	message    string
	details    map[string]any
	retryAfter string
}

func (e *v1Error) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

func (r *v1Response) err() *v1Error {
	e := &v1Error{status: r.status, retryAfter: r.header.Get("Retry-After")}
	var body apiv1.ErrorBody
	if json.Unmarshal(r.body, &body) == nil && body.Error.Message != "" {
		e.code, e.message, e.details = body.Error.Code, body.Error.Message, body.Error.Details
	} else {
		e.code, e.message = "internal", http.StatusText(r.status)
	}
	return e
}

// newV1Request builds an in-process request to the /v1 handler.
func newV1Request(ctx context.Context, who caller, method, path string, q url.Values, body io.Reader, ctype string) *http.Request {
	u := &url.URL{Path: path}
	if q != nil {
		u.RawQuery = q.Encode()
	}
	if body == nil {
		body = http.NoBody
	}
	r := httptest.NewRequest(method, u.String(), body).WithContext(ctx)
	r.RemoteAddr = "127.0.0.1:0"
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	return who.apply(r)
}

// call makes one /v1 request and reads the whole answer.
func (h *Handler) call(ctx context.Context, who caller, method, path string, q url.Values, body io.Reader, ctype string) *v1Response {
	rec := &captureWriter{header: http.Header{}}
	h.v1.ServeHTTP(rec, newV1Request(ctx, who, method, path, q, body, ctype))
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return &v1Response{status: rec.status, header: rec.header, body: rec.buf.Bytes()}
}

// callJSON sends in as JSON (nil: no body) and decodes a 2xx answer into
// out (may be nil); a non-2xx answer is a *v1Error.
func (h *Handler) callJSON(ctx context.Context, who caller, method, path string, q url.Values, in, out any) (int, error) {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	res := h.call(ctx, who, method, path, q, body, ctype)
	if !res.ok() {
		return res.status, res.err()
	}
	if out != nil && len(res.body) > 0 {
		if err := json.Unmarshal(res.body, out); err != nil {
			return res.status, fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return res.status, nil
}

// captureWriter collects a whole answer. It is a Flusher so that streaming
// handlers work; it offers no read deadlines (the caller has read its
// client's body, or streams it on under its own bounds).
type captureWriter struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captureWriter) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return c.buf.Write(b)
}
func (c *captureWriter) Flush() {}

// stream makes a /v1 request whose answer is read as it comes (event
// streams, file downloads). Close the body to end the request.
func (h *Handler) stream(ctx context.Context, who caller, method, path string, q url.Values) (status int, header http.Header, body io.ReadCloser) {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	sw := &pipeWriter{header: http.Header{}, ready: make(chan struct{}), pw: pw}
	go func() {
		defer func() {
			sw.WriteHeader(http.StatusOK)
			pw.Close()
		}()
		h.v1.ServeHTTP(sw, newV1Request(ctx, who, method, path, q, nil, ""))
	}()
	<-sw.ready
	return sw.status, sw.header.Clone(), &cancelReader{ReadCloser: pr, cancel: cancel}
}

type cancelReader struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelReader) Close() error {
	c.cancel()
	return c.ReadCloser.Close()
}

// pipeWriter hands a handler's answer to a reader as it is written.
type pipeWriter struct {
	header http.Header
	status int
	once   sync.Once
	ready  chan struct{}
	pw     *io.PipeWriter
}

func (p *pipeWriter) Header() http.Header { return p.header }
func (p *pipeWriter) WriteHeader(code int) {
	p.once.Do(func() {
		p.status = code
		close(p.ready)
	})
}
func (p *pipeWriter) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return p.pw.Write(b)
}
func (p *pipeWriter) Flush() {}
