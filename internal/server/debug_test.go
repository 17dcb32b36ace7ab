package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestCheckDebugListen(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"", true}, {"127.0.0.1:0", true}, {"[::1]:9000", true},
		{"0.0.0.0:9000", false}, {":9000", false}, {"10.0.0.1:9000", false}, {"localhost:9000", false}, {"127.0.0.1", false},
	} {
		if err := checkDebugListen(tc.addr); (err == nil) != tc.ok {
			t.Errorf("checkDebugListen(%q) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
	if _, err := ParseFlags([]string{"--debug-listen", "0.0.0.0:1"}); err == nil {
		t.Error("--debug-listen 0.0.0.0:1 accepted")
	}
}

// TestDebugRuntime serves the listener and reads figures that must be
// there for any live process.
func TestDebugRuntime(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var td teardown
	defer td.run()
	if err := startDebug("127.0.0.1:0", &td, log); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`debug_listen=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no debug_listen in %q", logs.String())
	}
	resp, err := http.Get("http://" + m[1] + "/debug/runtime")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var d DebugRuntime
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%d %q: %v", resp.StatusCode, b, err)
	}
	if d.Goroutines < 2 || d.HeapInuseBytes == 0 || d.RSSBytes < 1<<20 || d.HWMBytes < d.RSSBytes {
		t.Errorf("implausible figures: %s", b)
	}
	resp, err = http.Get("http://" + m[1] + "/debug/runtime?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("?gc=1: %d", resp.StatusCode)
	}
	if err := startDebug("", &td, log); err != nil {
		t.Errorf("empty address: %v", err)
	}
}

func TestStatusKiB(t *testing.T) {
	status := []byte("Name:\tspaced\nVmHWM:\t  2048 kB\nVmRSS:\t    1024 kB\n")
	if got := statusKiB(status, "VmRSS:"); got != 1024<<10 {
		t.Errorf("VmRSS = %d", got)
	}
	if got := statusKiB(status, "VmSwap:"); got != 0 {
		t.Errorf("absent VmSwap = %d", got)
	}
}
