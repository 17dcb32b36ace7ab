package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// httpFuzz is the server FuzzHTTP sends to: the test harness (fake worker,
// SQLite in a temp dir) with secrets, a tenant "carol" that owns one of
// each object, and the routes the server documents at /openapi.json.
type httpFuzz struct {
	e      *env
	client *http.Client
	keys   [5]string // carol (owner), alice (another tenant), admin, none, a bad key
	known  map[string]string
	routes []fuzzRoute
	// matched tells whether a request matches one of the documented
	// routes (a mux holding their patterns only).
	matched *http.ServeMux
	carol   string     // tenant id
	tmp     string     // the harness's temp dir, which no answer may name
	logs    *lockedBuf // the server's warnings and errors
}

type fuzzRoute struct {
	method, path string
	query        []string // documented query parameter names
}

// safeAgent is the guest agent the fuzzed server talks to. The fake
// worker's agents run processes on the host, so of the processes a fuzzed
// request asks for only echo and true start (with any arguments, cwd and
// environment but the dynamic loader's); everything else is refused as a
// guest would refuse a missing program.
type safeAgent struct{ worker.Guest }

func (a safeAgent) Start(ctx context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error) {
	ok := spec.Shell == "" && len(spec.Argv) > 0 && (spec.Argv[0] == "echo" || spec.Argv[0] == "true") && spec.User == ""
	for k := range spec.Env {
		ok = ok && !strings.HasPrefix(k, "LD_")
	}
	if !ok {
		return agentproto.ProcessInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "the fuzz harness starts only echo and true")
	}
	return a.Guest.Start(ctx, spec)
}

func newHTTPFuzz(f *testing.F) *httpFuzz {
	e := newEnv(f, Config{MaxWait: 50 * time.Millisecond})
	key, err := secrets.LoadKey(f.TempDir() + "/" + secrets.KeyFile)
	if err != nil {
		f.Fatal(err)
	}
	svc, err := secrets.New(e.store, key, nil)
	if err != nil {
		f.Fatal(err)
	}
	e.srv.secrets = svc
	e.worker.WrapGuest = func(id string, g worker.Guest) worker.Guest { return safeAgent{g} }
	ctx := context.Background()
	tn := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: "carol", Quota: store.Quota{MaxSandboxes: 4}, CreatedAt: time.Now()}
	if err := e.store.CreateTenant(ctx, tn); err != nil {
		f.Fatal(err)
	}
	// Every tenant the fuzzer acts as has a sandbox quota, so that it
	// cannot make fake VMs without end.
	adm, err := e.store.GetTenantByName(ctx, "admin")
	if err != nil {
		f.Fatal(err)
	}
	if err := e.store.SetTenantQuota(ctx, adm.ID, store.Quota{MaxSandboxes: 4}); err != nil {
		f.Fatal(err)
	}
	carolKey, _, err := e.srv.auth.CreateKey(ctx, tn.ID, false)
	if err != nil {
		f.Fatal(err)
	}
	hf := &httpFuzz{e: e, carol: tn.ID, tmp: f.TempDir(), logs: &lockedBuf{}, keys: [5]string{carolKey, e.aliceKey, e.adminKey, "", "space_garbage"},
		client: &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	e.srv.logger = slog.New(slog.NewTextHandler(hf.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	hf.objects(f)
	hf.loadRoutes(f)
	return hf
}

// objects makes carol's sandbox, command, checkpoint, secret and the
// operation that made the sandbox, and records their ids by path
// parameter name. It runs inside the fuzz function too (revive), so it
// uses t and nothing of the harness that would call the F.
func (hf *httpFuzz) objects(t testing.TB) {
	t.Helper()
	do := func(method, path string, body string, out any) int {
		req, err := http.NewRequest(method, hf.e.http.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+hf.keys[0])
		req.Header.Set("Content-Type", "application/json")
		resp, err := hf.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return resp.StatusCode
	}
	// wait waits for an operation and fails unless it succeeded.
	wait := func(what, id string) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var op apiv1.Operation
			do("GET", "/v1/operations/"+id+"?wait=1s", "", &op)
			switch {
			case op.State == apiv1.OpSucceeded:
				return
			case op.DoneAt != nil || time.Now().After(deadline):
				t.Fatalf("%s: operation %+v %+v\nserver log:\n%s", what, op, op.Error, hf.logTail())
			}
		}
	}
	var res apiv1.SandboxAndOperation
	if st := do("POST", "/v1/sandboxes", `{"template":"base"}`, &res); st != 202 {
		t.Fatalf("create: %d %+v", st, res)
	}
	wait("create", res.Operation.ID)
	sb := res.Sandbox.ID
	var cmd apiv1.CommandResponse
	if st := do("POST", "/v1/sandboxes/"+sb+"/commands", `{"argv":["echo","hi"]}`, &cmd); st != 201 {
		t.Fatalf("command: %d", st)
	}
	var ck struct {
		Checkpoint apiv1.Checkpoint `json:"checkpoint"`
		Operation  apiv1.Operation  `json:"operation"`
	}
	if st := do("POST", "/v1/sandboxes/"+sb+"/checkpoints", `{}`, &ck); st != 202 {
		t.Fatalf("checkpoint: %d", st)
	}
	wait("checkpoint", ck.Operation.ID)
	var sec apiv1.Secret
	if st := do("PUT", "/v1/secrets/api-key", `{"value":"s3cret"}`, &sec); st != 201 && st != 200 {
		t.Fatalf("secret: %d", st)
	}
	hf.known = map[string]string{"id": sb, "cid": cmd.Command.ID, "ckpt": ck.Checkpoint.ID, "name": "api-key",
		"operation": res.Operation.ID}
}

// route is the documented route named "METHOD /path", or for any other
// name one picked by the name's hash: seeds name their route and stay
// right as routes are added, while a mutated name reaches any route.
func (hf *httpFuzz) route(name string) fuzzRoute {
	for _, rt := range hf.routes {
		if rt.method+" "+rt.path == name {
			return rt
		}
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return hf.routes[int(h.Sum32()%uint32(len(hf.routes)))]
}

// logTail is the end of the server's log, for a failure message.
func (hf *httpFuzz) logTail() string {
	l := hf.logs.String()
	return l[max(0, len(l)-4000):]
}

// knownFor is the real object a path parameter of route path names.
func (hf *httpFuzz) knownFor(path, name string) string {
	switch {
	case strings.HasPrefix(path, "/v1/templates/") && name == "name":
		return "base"
	case strings.HasPrefix(path, "/v1/admin/tenants/"):
		return "alice"
	case strings.HasPrefix(path, "/v1/operations/"), strings.HasPrefix(path, "/v1/admin/keys/"):
		return hf.known["operation"]
	}
	return hf.known[name]
}

// loadRoutes reads the routes from the document the server serves.
func (hf *httpFuzz) loadRoutes(t testing.TB) {
	st, _, body := hf.e.do("GET", "/openapi.json", "", nil)
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, In string }
		}
	}
	if err := json.Unmarshal(body, &doc); st != 200 || err != nil || len(doc.Paths) == 0 {
		t.Fatalf("openapi.json: %d %v", st, err)
	}
	hf.matched = http.NewServeMux()
	for p, ops := range doc.Paths {
		for m, op := range ops {
			rt := fuzzRoute{method: strings.ToUpper(m), path: p}
			for _, prm := range op.Parameters {
				if prm.In == "query" {
					rt.query = append(rt.query, prm.Name)
				}
			}
			hf.routes = append(hf.routes, rt)
			hf.matched.HandleFunc(rt.method+" "+p, func(http.ResponseWriter, *http.Request) {})
		}
	}
	// Sorted, so that a name picks the same route every run.
	slices.SortFunc(hf.routes, func(a, b fuzzRoute) int { return strings.Compare(a.method+a.path, b.method+b.path) })
}

// revive gives carol a running sandbox again when the fuzzer deleted (or
// broke) hers, so later inputs reach past the sandbox lookup.
func (hf *httpFuzz) revive(t testing.TB) {
	ctx := context.Background()
	sb, err := hf.e.store.GetSandbox(ctx, hf.carol, hf.known["id"])
	if err == nil && sb.State != store.SandboxDeleted && sb.State != store.SandboxFailed && sb.State != store.SandboxDeleting {
		return
	}
	page, err := hf.e.store.ListSandboxes(ctx, store.SandboxFilter{TenantID: hf.carol})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(hf.e.http.URL, hf.keys[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, sb := range page.Items {
		if sb.State == store.SandboxDeleted {
			continue
		}
		if op, err := c.DeleteSandbox(ctx, sb.ID); err == nil {
			c.WaitOperation(ctx, op.ID)
		} else {
			live++ // busy (another operation runs on it): it stays for now
		}
	}
	// Room for the new objects and a few the fuzzer makes, whatever the
	// sandboxes that could not be deleted yet hold.
	if err := hf.e.store.SetTenantQuota(ctx, hf.carol, store.Quota{MaxSandboxes: live + 4}); err != nil {
		t.Fatal(err)
	}
	hf.objects(t)
}

var (
	pathParamNameRE = regexp.MustCompile(`\{([^}]+)\}`)
	oddMethods      = []string{"PATCH", "OPTIONS", "HEAD", "PUT", "DELETE", "POST", "GET", "PROPFIND", "TRACE"}
	// leakRE catches a fake VM's host directory or a stack trace in an
	// answer.
	leakRE = regexp.MustCompile(`space-api-vm-|goroutine [0-9]+|\.go:[0-9]+`)
)

// clean keeps the bytes of s that a URL query or header value can carry
// as they are, so that every request the fuzzer builds is sent.
func clean(s string, keep func(byte) bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if keep(s[i]) {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func queryByte(c byte) bool { return c > 0x20 && c < 0x7f && c != '#' }
func valueByte(c byte) bool { return c >= 0x20 && c < 0x7f }
func headerByte(c byte) bool {
	return c == '-' || (c|0x20 >= 'a' && c|0x20 <= 'z') || (c >= '0' && c <= '9')
}

// FuzzHTTP sends requests built from the fuzz input to every route of the
// OpenAPI document the server serves: the route's method or another one,
// its path parameters (real ids, or the input's), query parameters, one
// header, a body and a key of the owner, another tenant, an admin, none
// or a bad one. However odd the request, the answer is never a 5xx and
// every error is the contract's JSON error body, without host paths.
func FuzzHTTP(f *testing.F) {
	hf := newHTTPFuzz(f)
	f.Add("GET /v1/sandboxes/{id}", uint8(0), "", "", "", []byte(nil), uint8(0))
	f.Fuzz(func(t *testing.T, route string, method uint8, param, query, header string, body []byte, who uint8) {
		logged := len(hf.logs.String())
		hf.revive(t)
		rt := hf.route(route)
		m := rt.method
		if method >= 224 {
			m = oddMethods[int(method)%len(oddMethods)]
		}
		names := pathParamNameRE.FindAllStringSubmatch(rt.path, -1)
		p := pathParamNameRE.ReplaceAllStringFunc(rt.path, func(s string) string {
			name := s[1 : len(s)-1]
			if param != "" && name == names[len(names)-1][1] {
				return url.PathEscape(param)
			}
			return url.PathEscape(hf.knownFor(rt.path, name))
		})
		q := clean(query, queryByte)
		// A bare value names the route's first documented parameter, so
		// that a short input reaches a real one.
		if q != "" && !strings.Contains(q, "=") && len(rt.query) > 0 {
			q = rt.query[int(method)%len(rt.query)] + "=" + q
		}
		u := hf.e.http.URL + p
		if q != "" {
			u += "?" + q
		}
		req, err := http.NewRequest(m, u, bytes.NewReader(body))
		if err != nil {
			t.Fatalf("request %s %s: %v", m, u, err)
		}
		if k := hf.keys[int(who)%len(hf.keys)]; k != "" {
			req.Header.Set("Authorization", "Bearer "+k)
		}
		if name, value, ok := strings.Cut(header, ":"); ok {
			name = clean(name, headerByte)
			switch strings.ToLower(name) {
			case "", "host", "content-length", "transfer-encoding", "connection", "expect", "te", "upgrade", "trailer":
			default:
				req.Header.Set(name, clean(value, valueByte))
			}
		}
		resp, err := hf.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: no answer: %v", m, u, err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			t.Fatalf("%s %s: reading the answer: %v", m, u, err)
		}
		_, pattern := hf.matched.Handler(req)
		check := func(ok bool, format string, args ...any) {
			if !ok {
				t.Fatalf("%s %s (body %q, header %q) -> %d %s: %s", m, u, body, header, resp.StatusCode, out, fmt.Sprintf(format, args...))
			}
		}
		eb := struct {
			Error struct{ Code, Message string } `json:"error"`
		}{}
		isJSON := json.Unmarshal(out, &eb) == nil && eb.Error.Code != "" && eb.Error.Message != ""
		// The one 5xx by design: this server has no template builder.
		noBuilder := pattern == "POST /v1/templates" && resp.StatusCode == 503 && eb.Error.Code == "unavailable"
		check(resp.StatusCode < 500 || noBuilder, "a 5xx")
		// Every answer but a success is the JSON error, whether a route
		// matched or not (unknown routes and wrong methods included).
		if resp.StatusCode >= 300 && m != "HEAD" {
			check(isJSON, "not the JSON error body")
			check(strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json"), "error without a JSON content type")
		}
		// (Unless the request itself said it: messages may quote an id.)
		sent := string(body) + param + query + header
		check(resp.StatusCode < 300 || !leakRE.Match(out) || leakRE.MatchString(sent), "a host path or stack trace in an error")
		check(resp.StatusCode < 300 || !strings.Contains(string(out), hf.tmp), "a host path in an error")
		// Nor does the server fail otherwise (in an operation, say): it
		// logs no error but the one of the missing builder.
		for _, line := range strings.Split(hf.logs.String()[logged:], "\n") {
			if strings.Contains(line, "level=ERROR") && !strings.Contains(line, `err="this server does not build templates"`) {
				check(false, "the server logged an error:\n%s", line)
			}
		}
	})
}
