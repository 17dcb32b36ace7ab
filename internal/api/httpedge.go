package api

// The HTTP edge: the http.Server the API runs in, bounded so that one client
// cannot hold connections with bodies that never arrive, and answering in the
// contract's JSON error also where Go's server answers before any handler
// runs (a malformed request line or header, a bad Content-Length or
// percent-encoding, headers too large).

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// HTTPServer returns the http.Server to serve s with, bounded by s's Config
// (ReadHeaderTimeout, BodyTimeout, IdleTimeout, MaxHeaderBytes). Serve it on
// s.Listener(ln) so that Go's own rejects are JSON errors too.
func (s *Server) HTTPServer(errorLog *log.Logger) *http.Server {
	// HTTP/1.1 and HTTP/2 (over TLS by ALPN; in clear with prior
	// knowledge, h2c, which costs nothing and serves h2 clients of preview
	// hosts on a plain-HTTP listener).
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Protocols:         protocols,
		Handler:           s,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		// The bound for a request no handler adjusts; base and uploadBody
		// set the deadline each request really gets.
		ReadTimeout:    s.cfg.BodyTimeout,
		IdleTimeout:    s.cfg.IdleTimeout,
		MaxHeaderBytes: s.cfg.MaxHeaderBytes,
		ErrorLog:       errorLog,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ec, ok := c.(*edgeConn); ok {
				return context.WithValue(ctx, edgeConnKey, ec)
			}
			return ctx
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if ec, ok := c.(*edgeConn); ok {
				ec.setState(st)
			}
		},
	}
}

// Listener wraps ln for HTTPServer: the answers Go's server writes on a
// connection while no handler is serving it are its rejects of a request it
// could not parse (400, 431, 501, 505, 417), and those are rewritten into
// the contract's JSON error with the same status.
func (s *Server) Listener(ln net.Listener) net.Listener { return &edgeListener{Listener: ln, s: s} }

type edgeListener struct {
	net.Listener
	s *Server
}

func (l *edgeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &edgeConn{Conn: c, s: l.s}, nil
}

// edgeConn tells Go's rejects from handlers' answers by who is writing: from
// the moment base starts a request until the server goes idle on the
// connection (after the answer is flushed), writes are the handler's. Go
// writes a reject in one Write and then closes the connection.
type edgeConn struct {
	net.Conn
	s        *Server
	handler  atomic.Bool // a handler has the current request
	hijacked atomic.Bool // the connection is a handler's now, for good
	rejected atomic.Bool // a reject was rewritten; the server closes next
}

func (c *edgeConn) serving() { c.handler.Store(true) }

func (c *edgeConn) setState(st http.ConnState) {
	switch st {
	case http.StateIdle:
		c.handler.Store(false)
	case http.StateHijacked:
		c.hijacked.Store(true)
	}
}

func (c *edgeConn) Write(p []byte) (int, error) {
	if c.handler.Load() || c.hijacked.Load() {
		return c.Conn.Write(p)
	}
	if c.rejected.Load() {
		return len(p), nil
	}
	status, reason, ok := parseReject(p)
	if !ok {
		return c.Conn.Write(p)
	}
	c.rejected.Store(true)
	if _, err := c.Conn.Write(c.s.rejectResponse(c, status, reason)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite keeps Go's graceful close after a 431 (it half-closes a TCP
// connection and waits briefly, so the client reads the answer).
func (c *edgeConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// parseReject reads one of Go's rejects: "HTTP/1.1 <code> <text>\r\n",
// headers that close the connection, "\r\n\r\n", and a plain-text body that
// may carry the reason after ": ". Anything else is not a reject.
func parseReject(p []byte) (status int, reason string, ok bool) {
	head, body, found := bytes.Cut(p, []byte("\r\n\r\n"))
	if !found || len(head) < 12 || !bytes.HasPrefix(head, []byte("HTTP/1.1 ")) {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(head[9:12]))
	closes := bytes.Contains(head, []byte("\r\nConnection: close\r\n")) || bytes.HasSuffix(head, []byte("\r\nConnection: close"))
	if err != nil || status < 400 || !closes {
		return 0, "", false
	}
	if _, after, found := bytes.Cut(body, []byte(": ")); found {
		reason = string(after)
	}
	return status, reason, true
}

// rejectResponse is the JSON answer to a request Go's server rejected,
// written by the API's one error writer.
func (s *Server) rejectResponse(c net.Conn, status int, reason string) []byte {
	var err error
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		err = errdefs.New(errdefs.ErrPayloadTooLarge, "request headers too large")
	case http.StatusNotImplemented:
		err = errdefs.New(errdefs.ErrInvalidArgument, "unsupported transfer encoding")
	case http.StatusHTTPVersionNotSupported:
		err = errdefs.New(errdefs.ErrInvalidArgument, "unsupported HTTP version")
	case http.StatusExpectationFailed:
		err = errdefs.New(errdefs.ErrInvalidArgument, "unsupported Expect header (only 100-continue is)")
	default:
		msg := "malformed HTTP request"
		if reason != "" { // Go's reasons are fixed texts, never an echo of the request
			msg += ": " + reason
		}
		err = errdefs.New(errdefs.ErrInvalidArgument, "%s", msg)
	}
	id := newRequestID()
	r := (&http.Request{Method: "", Header: http.Header{}}).
		WithContext(context.WithValue(context.Background(), requestIDKey, id))
	bw := &bufferedResponse{header: http.Header{}}
	s.writeError(withStatus{bw, status}, r, err)
	s.logger.Info("http reject", "request_id", id, "status", status, "reason", reason,
		"remote", c.RemoteAddr().String())
	resp := &http.Response{
		StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Header: bw.header, Close: true,
		ContentLength: int64(bw.body.Len()), Body: io.NopCloser(&bw.body),
	}
	resp.Header.Set("X-Request-Id", id)
	var out bytes.Buffer
	_ = resp.Write(&out)
	return out.Bytes()
}

// bufferedResponse is an http.ResponseWriter into memory, for answers that
// are written outside any handler.
type bufferedResponse struct {
	header http.Header
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferedResponse) WriteHeader(int)             {}

// withStatus answers with status whatever the error's class maps to: for
// HTTP-level errors that have no class of their own (405, 431, 501, ...).
type withStatus struct {
	http.ResponseWriter
	status int
}

func (w withStatus) WriteHeader(int) { w.ResponseWriter.WriteHeader(w.status) }

// writeRouteError answers what the mux answers itself (no route, wrong
// method, a malformed request-target) as the contract's JSON error.
func (s *Server) writeRouteError(w http.ResponseWriter, r *http.Request, status int) {
	switch status {
	case http.StatusNotFound:
		s.writeError(w, r, errdefs.New(errdefs.ErrNotFound, "no such route (GET /openapi.json lists them)"))
	case http.StatusMethodNotAllowed:
		allow := w.Header().Get("Allow")
		err := errdefs.New(errdefs.ErrInvalidArgument, "method %s is not allowed on this route (allowed: %s)", r.Method, allow).
			WithDetails(map[string]any{"allowed": strings.Split(allow, ", ")})
		s.writeError(withStatus{w, status}, r, err)
	default:
		s.writeError(withStatus{w, status}, r, errdefs.New(errdefs.ErrInvalidArgument, "malformed request"))
	}
}

// boundedBody bounds the reading of a request body. A JSON body must be in
// within BodyTimeout of the request's start; an upload's reads must each
// progress within its idle bound. Once the body is in, net/http itself
// clears the deadline (its background read of the connection starts then),
// so the handler may run as long as it needs (exec, say); bodyless requests
// (event streams, long polls) start that way.
type boundedBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	idle     time.Duration // > 0: each read must progress within idle (uploads)
	eof      atomic.Bool
	timedOut atomic.Bool // a read hit the deadline
}

// boundBody sets the read deadline of a request with a body and wraps the
// body; it returns that wrapper, or nil for a bodyless request.
func (s *Server) boundBody(w http.ResponseWriter, r *http.Request) *boundedBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	b := &boundedBody{ReadCloser: r.Body, rc: rc}
	r.Body = b
	return b
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.eof.Load() {
		// Past the end: a deadline now would hit net/http's background
		// read and cancel the request.
		return 0, io.EOF
	}
	if b.idle > 0 {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.eof.Store(true)
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut.Store(true)
	}
	return n, err
}

// uploadBody lets an upload's body take as long as it keeps arriving.
func (s *Server) uploadBody(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if b, ok := r.Body.(*boundedBody); ok {
			b.idle = s.cfg.UploadIdleTimeout
			_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
		}
		next(w, r)
	}
}
