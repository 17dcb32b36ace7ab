package server

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/testenv"
)

// TestLimitPerClient: a client holding the bound of open connections gets
// its next one closed unserved; closing one of its connections frees a slot.
func TestLimitPerClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const max = 3
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(limitPerClient(ln, max, slog.New(slog.DiscardHandler))) }()
	t.Cleanup(func() {
		hs.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	addr := ln.Addr().String()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	// served sends a request on c and says whether it was answered.
	served := func(c net.Conn) bool {
		t.Helper()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return false
		}
		buf := make([]byte, 12)
		_, err := io.ReadFull(c, buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("connection neither served nor closed")
		}
		return err == nil && string(buf) == "HTTP/1.1 200"
	}

	held := make([]net.Conn, max)
	for i := range held {
		held[i] = dial()
		if !served(held[i]) { // kept alive afterwards: still open
			t.Fatalf("connection %d of %d not served", i+1, max)
		}
	}
	if served(dial()) {
		t.Fatalf("connection %d served; the bound is %d", max+1, max)
	}

	held[0].Close()
	// The slot comes back once the server has seen the close: bounded.
	testenv.Eventually(t, 10*time.Second, func() error {
		if !served(dial()) {
			return errors.New("no slot after a held connection closed")
		}
		return nil
	})
}

func TestLimitPerClientFlag(t *testing.T) {
	cfg, err := ParseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConnsPerClient != DefaultMaxConnsPerClient {
		t.Errorf("default %d, want %d", cfg.MaxConnsPerClient, DefaultMaxConnsPerClient)
	}
	if _, err := ParseFlags([]string{"--max-conns-per-client", "-1"}); err == nil {
		t.Error("a negative bound was accepted")
	}
}
