package e2b_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/store"
)

// syncBuffer is a log destination safe for the handler's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestEnvdAndBodiesCallTheService: the calls that reach a guest (files,
// filesystem, processes) and the REST calls with a body (create, timeout)
// are the Service's and answer as /v1 does: a file written is read back
// and listed, a process streams its output and its exit, a timeout beyond
// /v1's bound is 400, a create past the tenant's quota is 429, and each
// call is logged with its tenant, key and result, as /v1's access log
// logs its requests.
func TestEnvdAndBodiesCallTheService(t *testing.T) {
	logs := &syncBuffer{}
	e := newBenchEnvLog(t, logs)
	octet := map[string]string{"Content-Type": "application/octet-stream"}
	if w := e.do(t, "POST", "/files?path=/tmp/x/a.txt&username=root", "hello\n", octet); w.Code != http.StatusOK {
		t.Fatalf("upload: %d %s", w.Code, w.Body)
	}
	if w := e.do(t, "GET", "/files?path=/tmp/x/a.txt&username=root", "", nil); w.Code != http.StatusOK || w.Body.String() != "hello\n" {
		t.Fatalf("read back: %d %q", w.Code, w.Body)
	}
	if w := e.do(t, "GET", "/files?path=/tmp/x/none&username=root", "", nil); w.Code != http.StatusNotFound {
		t.Errorf("read of a missing file: %d %s, want 404", w.Code, w.Body)
	}
	w := e.do(t, "POST", "/filesystem.Filesystem/ListDir", `{"path":"/tmp/x","depth":1}`, map[string]string{"Content-Type": "application/json"})
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"name":"a.txt"`) || !strings.Contains(w.Body.String(), `"size":"6"`) {
		t.Errorf("ListDir: %d %s", w.Code, w.Body)
	}
	w = e.do(t, "POST", "/process.Process/Start", envelope(`{"process":{"cmd":"/bin/sh","args":["-c","echo hi; exit 3"]}}`),
		map[string]string{"Content-Type": "application/connect+json", "Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))})
	hi := base64.StdEncoding.EncodeToString([]byte("hi\n"))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"stdout":"`+hi+`"`) ||
		!strings.Contains(w.Body.String(), `"exitCode":3,"exited":true`) {
		t.Errorf("process start: %d %q", w.Code, w.Body)
	}
	w = e.do(t, "POST", "/sandboxes/"+e.sandbox+"/timeout", `{"timeout":99999999}`, nil)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "timeout_seconds") {
		t.Errorf("timeout beyond the bound: %d %s, want 400 naming timeout_seconds", w.Code, w.Body)
	}

	ctx := context.Background()
	tn := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: "carol", Quota: store.Quota{MaxSandboxes: 1}, CreatedAt: time.Now()}
	if err := e.st.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	key, _, err := e.au.CreateKey(ctx, tn.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	e.key = key
	if w := e.do(t, "POST", "/sandboxes", `{"templateID":"base"}`, nil); w.Code != http.StatusCreated {
		t.Fatalf("create within the quota: %d %s", w.Code, w.Body)
	}
	if w := e.do(t, "POST", "/sandboxes", `{"templateID":"base"}`, nil); w.Code != http.StatusTooManyRequests {
		t.Errorf("create past the quota: %d %s, want 429", w.Code, w.Body)
	}
	if w := e.do(t, "POST", "/sandboxes", `{"templateID":"base","metadata":{"bad key":"x"}}`, nil); w.Code != http.StatusBadRequest ||
		!strings.Contains(w.Body.String(), "metadata.bad key") {
		t.Errorf("create with a bad metadata key: %d %s, want 400 naming it", w.Code, w.Body)
	}

	got := logs.String()
	for _, want := range []string{
		`call="write file" sandbox=` + e.sandbox,
		`call="read file" sandbox=` + e.sandbox,
		`result=not_found`,
		`call="filesystem ListDir"`,
		`call="process start"`,
		`call="keep sandbox"`,
		`call="create sandbox"`,
		`result=resource_exhausted`,
		`tenant=` + tn.ID,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %s", want)
		}
	}
}
