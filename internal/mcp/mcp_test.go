package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestCapture(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int
		writes []string
		want   string
		cut    int64
	}{
		{"empty", 8, nil, "", 0},
		{"under", 8, []string{"ab", "cd"}, "abcd", 0},
		{"exactly", 8, []string{"abcdefgh"}, "abcdefgh", 0},
		{"over in one write", 8, []string{"abcdefghijkl"}, "abcd\n[… 4 bytes cut …]\nijkl", 4},
		{"over in many writes", 4, []string{"a", "b", "c", "d", "e", "f"}, "ab\n[… 2 bytes cut …]\nef", 2},
		{"tail keeps only the end", 4, []string{"ab", strings.Repeat("x", 100), "yz"}, "ab\n[… 100 bytes cut …]\nyz", 100},
		// A cut inside "é" (2 bytes) drops its halves rather than garbling
		// them, and counts them as cut.
		{"runes", 4, []string{"aé", "--", "éb"}, "a\n[… 6 bytes cut …]\nb", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCapture(tc.limit)
			for _, w := range tc.writes {
				c.Write([]byte(w))
			}
			got, cut := c.String()
			if got != tc.want || cut != tc.cut {
				t.Errorf("got %q (cut %d), want %q (cut %d)", got, cut, tc.want, tc.cut)
			}
		})
	}
}

// fakeAPI answers like spaced: /v1/features for any key but "bad", every
// other route not_found; it records the keys it saw.
type fakeAPI struct {
	mu   sync.Mutex
	keys []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.mu.Lock()
	f.keys = append(f.keys, key)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case key == "bad":
		w.WriteHeader(401)
		w.Write([]byte(`{"error":{"code":"unauthenticated","message":"invalid API key"}}`))
	case r.URL.Path == "/v1/features":
		w.Write([]byte(`{"features":[]}`))
	default:
		w.WriteHeader(404)
		w.Write([]byte(`{"error":{"code":"not_found","message":"sandbox \"sbx_x\" not found"}}`))
	}
}

func (f *fakeAPI) sawKey(k string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.keys {
		if s == k {
			return true
		}
	}
	return false
}

func connect(t *testing.T, ctx context.Context, s *Server) *mcpsdk.ClientSession {
	t.Helper()
	st, ct := mcpsdk.NewInMemoryTransports()
	ss, err := s.mcp.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func toolText(r *mcpsdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestErrorsAreToolResults: API errors and bad arguments come back as tool
// results with isError and the API's message, not as protocol errors.
func TestErrorsAreToolResults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	api := httptest.NewServer(&fakeAPI{})
	defer api.Close()
	s, err := New(Config{URL: api.URL, APIKey: "good"})
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, ctx, s)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_command", map[string]any{"sandbox_id": "sbx_x", "command": "true"}, `not_found: sandbox "sbx_x" not found`},
		{"run_command", map[string]any{"sandbox_id": "sbx_x"}, "exactly one of command"},
		{"run_command", map[string]any{"sandbox_id": "sbx_x", "command": "a", "argv": []string{"b"}}, "exactly one of command"},
		{"read_file", map[string]any{"sandbox_id": "sbx_x", "path": "/etc/hostname"}, "not_found"},
		{"write_file", map[string]any{"sandbox_id": "sbx_x", "path": "/x"}, "exactly one of content"},
		{"write_file", map[string]any{"sandbox_id": "sbx_x", "path": "/x", "content_base64": "!!"}, "content_base64"},
		{"delete_sandbox", map[string]any{"sandbox_id": ""}, "sandbox_id is required"},
		{"read_file", map[string]any{"sandbox_id": "sbx_x"}, "path"}, // schema: path is required
		{"get_preview_url", map[string]any{"sandbox_id": "sbx_x", "port": 8080}, `not_found: sandbox "sbx_x" not found`},
		{"get_preview_url", map[string]any{"sandbox_id": "sbx_x", "port": 0}, "port must be 1-65535"},
		{"get_preview_url", map[string]any{"sandbox_id": "sbx_x", "port": 70000}, "port must be 1-65535"},
		{"get_preview_url", map[string]any{"sandbox_id": "", "port": 80}, "sandbox_id is required"},
		{"list_ports", map[string]any{"sandbox_id": "sbx_x"}, "not_found"},
	} {
		res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil {
			t.Errorf("%s(%v): protocol error %v", tc.tool, tc.args, err)
			continue
		}
		if !res.IsError || !strings.Contains(toolText(res), tc.want) {
			t.Errorf("%s(%v) = isError %v %q, want an error containing %q", tc.tool, tc.args, res.IsError, toolText(res), tc.want)
		}
	}
}

// TestHTTPKeyPerCaller: over HTTP a caller's bearer token is the key its
// calls use; a key the API refuses gets 401.
func TestHTTPKeyPerCaller(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fake := &fakeAPI{}
	api := httptest.NewServer(fake)
	defer api.Close()
	s, err := New(Config{URL: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(s.HTTPHandler())
	defer h.Close()
	for _, key := range []string{"", "bad"} {
		req, _ := http.NewRequest("POST", h.URL, strings.NewReader(`{}`))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("key %q: status %d, want 401", key, resp.StatusCode)
		}
	}
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer caller-1")
		return http.DefaultTransport.RoundTrip(r)
	})}
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test"}, nil).Connect(ctx,
		&mcpsdk.StreamableClientTransport{Endpoint: h.URL, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: "list_files", Arguments: map[string]any{"sandbox_id": "sbx_x", "path": "/"}})
	if err != nil || !res.IsError {
		t.Fatalf("list_files: %v %+v", err, res)
	}
	if !fake.sawKey("caller-1") {
		t.Error("the API never saw the caller's key")
	}
	if fake.sawKey("") {
		t.Error("the API saw a call without a key")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestToolSchemas: every tool has a description, object input schema,
// output schema and annotations; destructive and read-only hints are set
// where they apply.
func TestToolSchemas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := New(Config{URL: "http://127.0.0.1:1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, ctx, s)
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) != 17 {
		t.Errorf("%d tools, want 17", len(res.Tools))
	}
	destructive := map[string]bool{"delete_sandbox": true, "restore_sandbox": true, "write_file": true,
		"run_command": true, "start_command": true}
	readOnly := map[string]bool{"list_sandboxes": true, "read_file": true, "list_files": true, "read_command_output": true,
		"list_ports": true}
	for _, tl := range res.Tools {
		b, _ := json.Marshal(tl.InputSchema)
		if tl.Description == "" || tl.OutputSchema == nil || tl.Annotations == nil || !strings.Contains(string(b), `"type":"object"`) {
			t.Errorf("tool %s: description, schemas or annotations missing: %s", tl.Name, b)
			continue
		}
		if got := *tl.Annotations.DestructiveHint; got != destructive[tl.Name] {
			t.Errorf("%s destructiveHint = %v", tl.Name, got)
		}
		if got := tl.Annotations.ReadOnlyHint; got != readOnly[tl.Name] {
			t.Errorf("%s readOnlyHint = %v", tl.Name, got)
		}
	}
}
