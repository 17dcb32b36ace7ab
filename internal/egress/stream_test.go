package egress

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// streamPart is the first part of a /stream response: longer than any
// secret, so a scrubber's hold-back leaves most of it to pass.
var streamPart = "part1:" + strings.Repeat("x", 200) + "\n"

// serveStream writes streamPart, flushes, and writes the rest only once
// the test lets it (streamGo) or after 20s: a proxy that holds the first
// part back until the body ends delivers nothing before the test gives up.
func (e *env) serveStream(w http.ResponseWriter) {
	io.WriteString(w, streamPart)
	w.(http.Flusher).Flush()
	select {
	case <-e.streamGo:
	case <-time.After(20 * time.Second):
	}
	io.WriteString(w, "part2\n")
}

// TestStreamedResponseNotHeldBack: the proxy forwards what the upstream
// sent without waiting for the body's end, plain and with a scrubber.
func TestStreamedResponseNotHeldBack(t *testing.T) {
	for name, p := range map[string]Policy{"plain": allowAllowed, "scrubbed": injectPolicy} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, p)
			resp, err := e.client().Get("http://allowed.test/stream")
			must(t, err)
			defer resp.Body.Close()
			got := make(chan string, 1)
			go func() {
				b := make([]byte, 100)
				n, _ := io.ReadFull(resp.Body, b)
				got <- string(b[:n])
			}()
			select {
			case s := <-got:
				if !strings.HasPrefix(streamPart, s) || len(s) != 100 {
					t.Fatalf("first part %q", s)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the first part of a streamed response did not reach the guest in 10s")
			}
			close(e.streamGo)
			rest, err := io.ReadAll(resp.Body)
			must(t, err)
			if !strings.HasSuffix(string(rest), "part2\n") {
				t.Fatalf("rest %q", rest)
			}
		})
	}
}
