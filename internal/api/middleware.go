package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
)

type ctxKey int

const (
	requestIDKey ctxKey = iota
	edgeConnKey         // the *edgeConn a request arrived on (httpedge.go)
)

// RequestID returns the id of the request ctx belongs to (set by the base
// middleware; "" outside a request): the Service's logs name it
// (sandbox.Deps.RequestID).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// principal returns who is calling; set by the auth middleware on /v1 routes.
func principal(ctx context.Context) auth.Principal {
	p, _ := auth.FromContext(ctx)
	return p
}

func (s *Server) log(r *http.Request) *slog.Logger {
	return s.logger.With("request_id", RequestID(r.Context()))
}

// statusWriter records what a handler answered, for logs and metrics. It
// passes Flush through and unwraps for http.ResponseController. It also
// turns the mux's own plain-text errors (no route, wrong method) into the
// contract's JSON, and closes the connection after an error answered before
// the request body was read, so the answer does not wait for that body.
type statusWriter struct {
	http.ResponseWriter
	s       *Server
	req     *http.Request // its Pattern is set by the mux once a route matches
	body    *boundedBody  // nil for a bodyless request
	status  int
	bytes   int64
	closing bool // answered with the body unread: the connection closes
	swallow bool // the handler's body, replaced by a JSON error
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status != 0 {
		w.ResponseWriter.WriteHeader(code) // net/http logs the superfluous call
		return
	}
	w.status = code
	if code >= 400 && w.body != nil && !w.body.eof.Load() {
		// Set before the header goes out: net/http would otherwise read
		// the rest of the body first, for as long as the client takes.
		w.Header().Set("Connection", "close")
		w.closing = true
	}
	switch {
	case code >= 400 && w.body != nil && w.body.timedOut.Load():
		// Whatever the handler made of the failed read (often the
		// cancelled context), the cause is the body that did not come.
		w.status, w.swallow = http.StatusRequestTimeout, true
		w.s.writeError(withStatus{w.ResponseWriter, w.status}, w.req,
			errdefs.New(errdefs.ErrDeadlineExceeded, "the request body did not arrive in time"))
	case muxError(code) && w.req.Pattern == "": // the mux answers itself: no route matched
		w.swallow = true
		w.s.writeRouteError(w.ResponseWriter, w.req, code)
	default:
		w.ResponseWriter.WriteHeader(code)
	}
}

// muxError says whether code is one that http.ServeMux answers itself.
func muxError(code int) bool {
	return code == http.StatusNotFound || code == http.StatusMethodNotAllowed || code == http.StatusBadRequest
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.swallow {
		return len(b), nil
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// validRequestID accepts a caller's X-Request-Id only when it is short and
// plain, so it can go into logs and headers verbatim.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:", c)) {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [12]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// base wraps the whole mux: request id, the read bound of the body
// (httpedge.go), panic recovery, JSON errors for what the mux answers itself,
// access log and the latency histogram (labelled with the matched route
// pattern).
func (s *Server) base(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ec, ok := r.Context().Value(edgeConnKey).(*edgeConn); ok {
			ec.serving()
		}
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey, id))
		sw := &statusWriter{ResponseWriter: w, s: s, req: r, body: s.boundBody(w, r)}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log(r).Error("panic in handler", "panic", v, "stack", string(debug.Stack()))
				if sw.status == 0 {
					s.writeError(sw, r, errdefs.ErrInternal)
				}
			}
			if sw.closing && !sw.body.eof.Load() {
				// net/http drains the unread body before it closes; fail that
				// read at once instead of waiting for a body nobody will use.
				_ = sw.body.rc.SetReadDeadline(time.Now())
			}
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			d := time.Since(start)
			s.metrics.RequestDuration.WithLabelValues(route, r.Method, strconv.Itoa(status)).Observe(d.Seconds())
			s.log(r).Info("http", "method", r.Method, "path", r.URL.Path, "route", route,
				"status", status, "bytes", sw.bytes, "duration_ms", d.Milliseconds(),
				"tenant", principal(r.Context()).TenantID)
		}()
		next.ServeHTTP(sw, r)
	})
}

// authLevel says who may call a route.
type authLevel int

const (
	authNone authLevel = iota
	authTenant
	authAdmin
)

// authenticate resolves the bearer key into a principal on the request context.
func (s *Server) authenticate(level authLevel, next http.HandlerFunc) http.HandlerFunc {
	if level == authNone {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		// A principal already in the context was put there in-process by a
		// front end that authenticated the caller itself (internal/e2b's
		// envd side, by the sandbox's access token); nothing a client sends
		// can set it. It is never enough for admin routes.
		if _, ok := auth.FromContext(r.Context()); ok && level == authTenant {
			next(w, r)
			return
		}
		token, ok := auth.TokenFromHeader(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="space"`)
			s.writeError(w, r, errdefs.New(errdefs.ErrUnauthenticated, "missing bearer API key"))
			return
		}
		p, err := s.auth.Authenticate(r.Context(), token)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="space"`)
			s.writeError(w, r, err)
			return
		}
		ctx := auth.WithPrincipal(r.Context(), p)
		if level == authAdmin && !p.Admin {
			*r = *r.WithContext(ctx)
			s.writeError(w, r, errdefs.New(errdefs.ErrPermissionDenied, "this route needs an admin API key"))
			return
		}
		// Let the access log (which runs outside) see the tenant too.
		*r = *r.WithContext(ctx)
		next(w, r)
	}
}

// oversizeDrainBytes bounds the body of a request declared too large that
// is still read (and dropped, under the body's deadline) before its 413
// goes out. A client writes its body before it reads the answer: refused
// unread, the connection closes on data the server never read, the kernel
// answers with a reset, and a client still writing loses the 413 to
// "connection reset by peer". Past this bound the 413 goes out at once and
// the connection closes.
const oversizeDrainBytes = 1 << 20

// limitBody caps the request body; reads past the limit fail with a
// MaxBytesError that bodyError turns into 413.
func (s *Server) limitBody(limit int64, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			if r.ContentLength <= oversizeDrainBytes {
				_, _ = io.Copy(io.Discard, r.Body)
			}
			s.writeError(w, r, bodyError(&http.MaxBytesError{Limit: limit}))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next(w, r)
	}
}
