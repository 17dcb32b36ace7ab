package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"
)

// The debug listener is for tests only: it serves what spaced itself holds
// (heap, resident memory, goroutines) so that a test driving a hostile guest
// can see the host process grow. It is off unless --debug-listen names a
// loopback address, and it is a listener of its own rather than a route of
// the API, so no API key reaches it and nothing it serves can be asked for
// by a tenant. It also serves Go's profiles under /debug/pprof/, for
// benches that look for what limits the server (bench/control -pprof).

// DebugRuntime is what GET /debug/runtime answers, as JSON (with ?gc=1:
// after a forced collection that gives freed memory back to the system).
type DebugRuntime struct {
	Goroutines     int    `json:"goroutines"`
	HeapInuseBytes uint64 `json:"heap_inuse_bytes"`
	HeapSysBytes   uint64 `json:"heap_sys_bytes"`
	// RSSBytes is VmRSS from /proc/self/status (0 if unreadable).
	RSSBytes uint64 `json:"rss_bytes"`
	// HWMBytes is VmHWM, the resident peak since start.
	HWMBytes uint64 `json:"rss_peak_bytes"`
}

// checkDebugListen refuses a debug address that is not loopback: what it
// serves is for a test on the same host.
func checkDebugListen(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--debug-listen %q: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("--debug-listen must be a loopback address such as 127.0.0.1:0, not %q", addr)
	}
	return nil
}

// startDebug serves the debug listener on addr until td runs; "" serves
// nothing. It logs "debug serving" with the bound address.
func startDebug(addr string, td *teardown, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/runtime", func(w http.ResponseWriter, r *http.Request) {
		// ?gc=1 collects and returns freed memory to the system first, so
		// a test's calm baseline is not what an earlier attack left for
		// the collector.
		if r.URL.Query().Get("gc") != "" {
			debug.FreeOSMemory()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(readRuntime())
	})
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug listener", "err", err)
		}
	}()
	td.add(func() { _ = hs.Close() })
	log.Info("debug serving (tests only: process memory, goroutines and profiles)", "debug_listen", ln.Addr().String())
	return nil
}

func readRuntime() DebugRuntime {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	d := DebugRuntime{Goroutines: runtime.NumGoroutine(), HeapInuseBytes: ms.HeapInuse, HeapSysBytes: ms.HeapSys}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		d.RSSBytes = statusKiB(b, "VmRSS:")
		d.HWMBytes = statusKiB(b, "VmHWM:")
	}
	return d
}

// statusKiB is the value of a "Key:   N kB" line of /proc/self/status, in bytes.
func statusKiB(status []byte, key string) uint64 {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte(key))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		return n << 10
	}
	return 0
}
