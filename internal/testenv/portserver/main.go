// Command portserver is the HTTP server tests run inside a sandbox to
// exercise the port proxy: what busybox httpd cannot do (streamed responses,
// request bodies, WebSocket). It is built static (CGO_ENABLED=0) by
// testenv.PortServerBinary, copied into a guest with the files API and
// started with a command; nothing but tests uses it.
//
// Routes:
//
//	GET  /               "portserver\n"
//	GET  /headers        the request's headers as JSON (what the proxy forwarded)
//	GET  /sse            text/event-stream: "data: N" every 200 ms, flushed, ?count= lines (default 10);
//	                     with ?hold=NAME it stops after the first line until GET /release?name=NAME
//	GET  /release?name=  lets the held /sse of that name go on
//	POST /upload         reads the body; answers {"bytes": n, "sha256": hex}
//	GET  /download?bytes=N  N bytes of a repeating pattern (application/octet-stream)
//	GET  /ws             WebSocket echo (every message sent back as received)
//
// The WebSocket side uses github.com/coder/websocket: a maintained,
// dependency-free implementation of RFC 6455 with context-aware reads, so the
// test server stays a few lines and needs nothing outside the module proxy.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// The line a starter waits for: the port is open from here on.
	fmt.Printf("listening %s\n", ln.Addr())
	log.Fatal(http.Serve(ln, handler()))
}

func handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "portserver\n")
	})
	mux.HandleFunc("GET /headers", func(w http.ResponseWriter, r *http.Request) {
		h := map[string]any{"headers": r.Header, "host": r.Host, "uri": r.RequestURI}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h)
	})
	mux.HandleFunc("GET /sse", sse)
	mux.HandleFunc("GET /release", func(w http.ResponseWriter, r *http.Request) {
		close(hold(r.URL.Query().Get("name")))
		io.WriteString(w, "released\n")
	})
	mux.HandleFunc("POST /upload", upload)
	mux.HandleFunc("GET /download", download)
	mux.HandleFunc("GET /ws", echo)
	return mux
}

var (
	holdsMu sync.Mutex
	holds   = map[string]chan struct{}{}
)

// hold is the channel of a held stream's name: the first call makes it, a
// later one (the release) takes it out.
func hold(name string) chan struct{} {
	holdsMu.Lock()
	defer holdsMu.Unlock()
	if c, ok := holds[name]; ok {
		delete(holds, name)
		return c
	}
	c := make(chan struct{})
	holds[name] = c
	return c
}

func sse(w http.ResponseWriter, r *http.Request) {
	count := 10
	if s := r.URL.Query().Get("count"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 {
			http.Error(w, "bad count", http.StatusBadRequest)
			return
		}
		count = n
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	var held chan struct{}
	if name := r.URL.Query().Get("hold"); name != "" {
		held = hold(name)
	}
	for i := range count {
		if i == 1 && held != nil {
			select {
			case <-r.Context().Done():
				return
			case <-held:
			}
		}
		if i > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		fmt.Fprintf(w, "data: %d\n\n", i)
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

func upload(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"bytes": n, "sha256": hex.EncodeToString(h.Sum(nil))})
}

// pattern is what /download repeats: bytes a test can check at any offset.
var pattern = []byte("0123456789abcdef")

func download(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
	if err != nil || n < 0 {
		http.Error(w, "bytes=N required", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = pattern[i%len(pattern)]
	}
	for n > 0 {
		chunk := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:chunk]); err != nil {
			return
		}
		n -= chunk
	}
}

func echo(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	ctx := r.Context()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		if err := c.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}
