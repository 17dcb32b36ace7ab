package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// lockedBuf is a log sink the server writes from many goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// withSecrets gives e's server a secrets service (key in a temp dir) and
// sends every log line of server and service to the returned buffer.
func withSecrets(t testing.TB, e *env) (*secrets.Service, *lockedBuf) {
	t.Helper()
	key, err := secrets.LoadKey(t.TempDir() + "/" + secrets.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuf{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := secrets.New(e.store, key, log)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.secrets, e.srv.logger = svc, log
	return svc, logs
}

func tenantID(t *testing.T, st store.Store, name string) string {
	t.Helper()
	tn, err := st.GetTenantByName(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return tn.ID
}

const secretValue = "sk-test-9f8e7d6c5b4a39281706"

func TestSecretsRoutes(t *testing.T) {
	e := newEnv(t, Config{})
	svc, logs := withSecrets(t, e)
	put := func(key, name, value string) (int, []byte) {
		b, _ := json.Marshal(apiv1.PutSecretRequest{Value: value})
		st, _, body := e.do("PUT", "/v1/secrets/"+name, key, b)
		return st, body
	}
	st, body := put(e.aliceKey, "example", secretValue)
	if st != 201 {
		t.Fatalf("first put: %d %s", st, body)
	}
	var sec apiv1.Secret
	if err := json.Unmarshal(body, &sec); err != nil || sec.Name != "example" || sec.CreatedAt.IsZero() {
		t.Fatalf("put answer %s: %v", body, err)
	}
	if st, body = put(e.aliceKey, "example", secretValue+"-2"); st != 200 {
		t.Fatalf("replace: %d %s", st, body)
	}
	st, _, body = e.do("GET", "/v1/secrets", e.aliceKey, nil)
	var list apiv1.SecretList
	if err := json.Unmarshal(body, &list); st != 200 || err != nil || len(list.Secrets) != 1 || list.Secrets[0].Name != "example" {
		t.Fatalf("list: %d %s", st, body)
	}
	// Bob sees none of Alice's.
	st, _, body = e.do("GET", "/v1/secrets", e.bobKey, nil)
	if st != 200 || strings.Contains(string(body), "example") {
		t.Fatalf("bob's list: %d %s", st, body)
	}
	st, _, body = e.do("DELETE", "/v1/secrets/example", e.bobKey, nil)
	wantError(t, st, body, 404, "not_found")

	// The worker's lookup resolves by tenant id (SandboxSpec.SecretScope).
	if v, err := svc.Resolve(context.Background(), tenantID(t, e.store, "alice"), "example"); err != nil || v != secretValue+"-2" {
		t.Fatalf("resolve: %v", err)
	}

	for name, body := range map[string]string{
		"bad name":      `{"value":"x"}`,
		"example":       `{"value":""}`,
		"example2":      `{"value":"x","extra":1}`,
		"-starts-badly": `{"value":"x"}`,
	} {
		if name == "bad name" {
			name = "bad%20name"
		}
		st, _, b := e.do("PUT", "/v1/secrets/"+name, e.aliceKey, []byte(body))
		wantError(t, st, b, 400, "invalid_argument")
	}
	st, _, body = e.do("DELETE", "/v1/secrets/example", e.aliceKey, nil)
	if st != 204 {
		t.Fatalf("delete: %d %s", st, body)
	}
	st, _, body = e.do("DELETE", "/v1/secrets/example", e.aliceKey, nil)
	wantError(t, st, body, 404, "not_found")

	if strings.Contains(logs.String(), secretValue) {
		t.Fatal("a log line holds the secret's value")
	}
	if !strings.Contains(logs.String(), "secret stored") {
		t.Fatal("the log sink saw nothing: the check above proves nothing")
	}
}

func TestSecretsUnconfigured(t *testing.T) {
	e := newEnv(t, Config{})
	st, _, body := e.do("PUT", "/v1/secrets/x", e.aliceKey, []byte(`{"value":"v"}`))
	wantError(t, st, body, 503, "unavailable")
}

func TestCreateWithNetworkPolicy(t *testing.T) {
	e := newEnv(t, Config{})
	policy := `{"egress":{"default":"deny","allow":["api.example.com","*.github.com","203.0.113.0/24"]},` +
		`"inject":[{"domain":"api.example.com","header":"Authorization","value":"Bearer ${secret:example}"}]}`
	st, _, body := e.do("POST", "/v1/sandboxes", e.aliceKey, []byte(`{"template":"base","network":`+policy+`}`))
	if st != 202 {
		t.Fatalf("create: %d %s", st, body)
	}
	var res apiv1.SandboxAndOperation
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if _, err := e.alice.WaitOperation(context.Background(), res.Operation.ID); err != nil {
		t.Fatal(err)
	}
	got, err := e.alice.GetSandbox(context.Background(), res.Sandbox.ID)
	if err != nil {
		t.Fatal(err)
	}
	p, err := egress.ParsePolicy(got.Network)
	if err != nil || len(p.Egress.Allow) != 3 || p.Inject[0].Value != "Bearer ${secret:example}" {
		t.Fatalf("GET network %s: %v", got.Network, err)
	}
	vm := e.worker.VM(got.ID)
	if vm == nil {
		t.Fatal("no VM")
	}
	if !jsonEqual(t, vm.Spec.Network, []byte(policy)) || vm.Spec.SecretScope != tenantID(t, e.store, "alice") {
		t.Fatalf("worker spec network %s scope %q", vm.Spec.Network, vm.Spec.SecretScope)
	}

	for name, tc := range map[string]struct{ network, field string }{
		"bad default":    {`{"egress":{"default":"sometimes"}}`, "network.egress.default"},
		"bad allow":      {`{"egress":{"allow":["not a domain!"]}}`, "network.egress.allow[0]"},
		"host header":    {`{"inject":[{"domain":"a.example","header":"Host","value":"x"}]}`, "network.inject[0].header"},
		"bad reference":  {`{"inject":[{"domain":"a.example","header":"X-K","value":"${secret:}"}]}`, "network.inject[0].value"},
		"unknown field":  {`{"egress":{},"proxy":"x"}`, "network.proxy"},
		"not an object":  {`"allow everything"`, "network"},
		"CIDR in inject": {`{"inject":[{"domain":"10.0.0.0/8","header":"X-K","value":"v"}]}`, "network.inject[0].domain"},
	} {
		t.Run(name, func(t *testing.T) {
			st, _, body := e.do("POST", "/v1/sandboxes", e.aliceKey, []byte(`{"template":"base","network":`+tc.network+`}`))
			er := wantError(t, st, body, 400, "invalid_argument")
			fields, _ := er.Details["fields"].(map[string]any)
			if _, ok := fields[tc.field]; !ok {
				t.Fatalf("details.fields %v lacks %q", er.Details, tc.field)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func TestPutNetwork(t *testing.T) {
	e := newEnv(t, Config{})
	sb := e.running(e.alice, nil)
	policy := `{"egress":{"allow":["pypi.org"]}}`
	st, _, body := e.do("PUT", "/v1/sandboxes/"+sb.ID+"/network", e.aliceKey, []byte(policy))
	if st != 200 {
		t.Fatalf("put network: %d %s", st, body)
	}
	var got apiv1.Sandbox
	if err := json.Unmarshal(body, &got); err != nil || !jsonEqual(t, got.Network, []byte(policy)) {
		t.Fatalf("answer %s: %v", body, err)
	}
	if !jsonEqual(t, e.worker.VM(sb.ID).Spec.Network, []byte(policy)) {
		t.Fatalf("worker did not get the policy: %s", e.worker.VM(sb.ID).Spec.Network)
	}
	again, err := e.alice.GetSandbox(context.Background(), sb.ID)
	if err != nil || !jsonEqual(t, again.Network, []byte(policy)) {
		t.Fatalf("GET after PUT: %s %v", again.Network, err)
	}

	st, _, body = e.do("PUT", "/v1/sandboxes/"+sb.ID+"/network", e.aliceKey, []byte(`{"egress":{"allow":["bad domain"]}}`))
	er := wantError(t, st, body, 400, "invalid_argument")
	if f, _ := er.Details["fields"].(map[string]any); f["network.egress.allow[0]"] == nil {
		t.Fatalf("fields: %v", er.Details)
	}
	if !jsonEqual(t, e.worker.VM(sb.ID).Spec.Network, []byte(policy)) {
		t.Fatal("a rejected policy reached the worker")
	}
	st, _, body = e.do("PUT", "/v1/sandboxes/"+sb.ID+"/network", e.bobKey, []byte(policy))
	wantError(t, st, body, 404, "not_found")
	st, _, body = e.do("PUT", "/v1/sandboxes/sbx_nope/network", e.aliceKey, []byte(policy))
	wantError(t, st, body, 404, "not_found")

	// A sandbox in a transition is a 409 with its state.
	if _, err := e.store.TransitionSandbox(context.Background(), store.AnyTenant, sb.ID, nil, store.SandboxDeleting, nil); err != nil {
		t.Fatal(err)
	}
	st, _, body = e.do("PUT", "/v1/sandboxes/"+sb.ID+"/network", e.aliceKey, []byte(policy))
	if er := wantError(t, st, body, 409, "conflict"); er.Details["state"] != "deleting" {
		t.Fatalf("details %v", er.Details)
	}
}

func TestNetworkLogGate(t *testing.T) {
	off := newEnv(t, Config{})
	sb := off.running(off.alice, nil)
	st, _, body := off.do("GET", "/v1/sandboxes/"+sb.ID+"/network/log", off.aliceKey, nil)
	if er := wantError(t, st, body, 400, "invalid_argument"); er.Details["feature"] != "network_log" {
		t.Fatalf("details %v", er.Details)
	}

	on := newEnv(t, Config{Features: []string{"network_log"}})
	sb = on.running(on.alice, nil)
	on.worker.VM(sb.ID).NetLog = []worker.NetworkRecord{
		{Time: time.Now(), Sandbox: sb.ID, Kind: "http", Destination: "api.example.com:80", Upstream: "192.0.2.1:80",
			Allowed: true, Rule: "allow api.example.com", BytesOut: 10, BytesIn: 20, Injected: []string{"Authorization"}},
		{Time: time.Now(), Sandbox: sb.ID, Kind: "tcp", Destination: "198.51.100.7:443", Rule: "default deny"},
	}
	st, _, body = on.do("GET", "/v1/sandboxes/"+sb.ID+"/network/log", on.aliceKey, nil)
	var lg apiv1.NetworkLog
	if err := json.Unmarshal(body, &lg); st != 200 || err != nil || len(lg.Records) != 2 {
		t.Fatalf("log: %d %s", st, body)
	}
	if r := lg.Records[0]; !r.Allowed || r.Injected[0] != "Authorization" || r.BytesIn != 20 || lg.Records[1].Allowed {
		t.Fatalf("records: %+v", lg.Records)
	}
	st, _, body = on.do("GET", "/v1/sandboxes/"+sb.ID+"/network/log", on.bobKey, nil)
	wantError(t, st, body, 404, "not_found")
	st, _, body = on.do("GET", "/v1/features", on.aliceKey, nil)
	if st != 200 || !strings.Contains(string(body), `"network_log"`) {
		t.Fatalf("features: %s", body)
	}
}
