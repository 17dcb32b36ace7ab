package remote_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

func newToken(t testing.TB) remote.Token {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	tok, err := remote.NewToken(hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// logBuffer is a slog destination a test can read while servers write.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// served is one protocol server over a worker, on a loopback listener.
type served struct {
	t     testing.TB
	w     worker.Worker
	token remote.Token
	addr  string
	log   *logBuffer
	srv   *remote.Server
	hs    *http.Server
	done  chan struct{}
	// wrap, when set, wraps the server's handler (a test counting calls).
	wrap func(http.Handler) http.Handler
}

// serve starts a server over w on 127.0.0.1 (a free port); it stops with
// the test.
func serve(t testing.TB, w worker.Worker, token remote.Token) *served {
	t.Helper()
	return serveWrapped(t, w, token, nil)
}

// serveWrapped is serve with the server's handler wrapped from the start.
func serveWrapped(t testing.TB, w worker.Worker, token remote.Token, wrap func(http.Handler) http.Handler) *served {
	t.Helper()
	s := &served{t: t, w: w, token: token, addr: "127.0.0.1:0", log: &logBuffer{}, wrap: wrap}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// start (re)starts the server on s.addr.
func (s *served) start() {
	s.t.Helper()
	ln, err := listenRetry(s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	srv, err := remote.NewServer(remote.ServerConfig{Worker: s.w, Token: s.token,
		Logger: slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		s.t.Fatal(err)
	}
	hs := srv.HTTPServer(nil)
	if s.wrap != nil {
		hs.Handler = s.wrap(hs.Handler)
	}
	s.srv, s.hs, s.done = srv, hs, make(chan struct{})
	go func() {
		defer close(s.done)
		_ = hs.Serve(ln)
	}()
}

// stop ends the server as a killed process would: every connection cut.
func (s *served) stop() {
	if s.hs == nil {
		return
	}
	_ = s.hs.Close()
	s.srv.Close()
	<-s.done
	s.hs = nil
}

// listenRetry listens on addr, retrying briefly while a port just closed
// is still held.
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

// client returns a protocol client of s with token; closed with the test.
func (s *served) client(t testing.TB, token remote.Token) *remote.Client {
	t.Helper()
	c, err := remote.NewClient(remote.ClientConfig{Address: s.addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
