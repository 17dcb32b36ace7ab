package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// shared is one server and one running sandbox that the API tests share, so
// the suite boots few VMs. Tests that need their own server make one.
var shared struct {
	once sync.Once
	srv  *server
	c    *client
	sbx  apiv1.Sandbox
}

// TestAPI runs the checks that share one server; its cleanup tears it down
// after all of them.
func TestAPI(t *testing.T) {
	srv := startServer(t, "--quota-memory-mib", "2048")
	c := srv.client(srv.AdminKey)
	sbx := c.createSandbox(map[string]any{"metadata": map[string]string{"suite": "e2e"}, "env": map[string]string{"GREETING": "hi"}})

	t.Run("Discovery", func(t *testing.T) { testDiscovery(t, srv) })
	t.Run("SandboxGetList", func(t *testing.T) { testSandboxGetList(t, c, sbx) })
	t.Run("Exec", func(t *testing.T) { testExec(t, c, sbx) })
	t.Run("CommandEvents", func(t *testing.T) { testCommandEvents(t, c, sbx) })
	t.Run("CommandSSE", func(t *testing.T) { testCommandSSE(t, c, sbx) })
	t.Run("CommandStdinSignal", func(t *testing.T) { testCommandStdinSignal(t, c, sbx) })
	t.Run("CommandTimeout", func(t *testing.T) { testCommandTimeout(t, c, sbx) })
	t.Run("Files", func(t *testing.T) { testFiles(t, c, sbx) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, srv, sbx) })
	t.Run("TenantIsolation", func(t *testing.T) { testTenantIsolation(t, srv, sbx) })
	t.Run("Idempotency", func(t *testing.T) { testIdempotency(t, c, sbx) })
	t.Run("Operations", func(t *testing.T) { testOperations(t, c, sbx) })
	t.Run("PythonWalkthrough", func(t *testing.T) { testPythonWalkthrough(t, srv) })
	t.Run("CLI", func(t *testing.T) { testCLI(t, srv, sbx) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, c, sbx) })
}

func testDiscovery(t *testing.T, srv *server) {
	anon := srv.client("")
	for _, p := range []string{"/healthz", "/readyz", "/openapi.json", "/metrics"} {
		if st := anon.do("GET", p, nil, nil); st != 200 {
			t.Errorf("GET %s = %d", p, st)
		}
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	anon.mustDo("GET", "/openapi.json", nil, &doc, 200)
	if !strings.HasPrefix(doc.OpenAPI, "3.1") || doc.Paths["/v1/sandboxes/{id}/commands/{cid}/events"] == nil {
		t.Errorf("openapi %q with %d paths lacks the events route", doc.OpenAPI, len(doc.Paths))
	}
	resp := anon.request("GET", "/metrics", nil, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"space_http_request_duration_seconds", "space_vm_boot_duration_seconds"} {
		if !bytes.Contains(b, []byte(m)) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	var feats apiv1.FeatureList
	srv.client(srv.AdminKey).mustDo("GET", "/v1/features", nil, &feats, 200)
}

func testSandboxGetList(t *testing.T, c *client, sbx apiv1.Sandbox) {
	var got apiv1.Sandbox
	c.mustDo("GET", "/v1/sandboxes/"+sbx.ID, nil, &got, 200)
	if got.Template != "base" || !strings.HasPrefix(got.TemplateDigest, "sha256:") || got.VCPUs < 1 || got.MemoryMiB < 64 {
		t.Errorf("sandbox = %+v", got)
	}
	var list apiv1.SandboxList
	c.mustDo("GET", "/v1/sandboxes?state=running&metadata.suite=e2e", nil, &list, 200)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sbx.ID {
		t.Errorf("filtered list = %+v", list.Sandboxes)
	}
	c.mustDo("GET", "/v1/sandboxes?metadata.suite=other", nil, &list, 200)
	if len(list.Sandboxes) != 0 {
		t.Errorf("list with a non-matching metadata filter = %+v", list.Sandboxes)
	}
}

func testExec(t *testing.T, c *client, sbx apiv1.Sandbox) {
	var res apiv1.ExecResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/exec", map[string]any{
		"shell": "echo $GREETING; cat; echo oops >&2; exit 5", "stdin_data": "from-stdin\n"}, &res, 200)
	if res.ExitCode == nil || *res.ExitCode != 5 || res.Reason != "exited" {
		t.Errorf("exec exit = %v %s", res.ExitCode, res.Reason)
	}
	if res.Stdout != "hi\nfrom-stdin\n" || res.Stderr != "oops\n" {
		t.Errorf("exec stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	// What one command writes, the next sees.
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/exec", map[string]any{"shell": "echo persisted > /root/state"}, &res, 200)
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/exec", map[string]any{"argv": []string{"cat", "/root/state"}}, &res, 200)
	if res.Stdout != "persisted\n" {
		t.Errorf("second command saw %q", res.Stdout)
	}
}

func testCommandEvents(t *testing.T, c *client, sbx apiv1.Sandbox) {
	var cmd apiv1.CommandResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/commands", map[string]any{
		"shell": "for i in 1 2 3; do echo line$i; done; printf '\\377\\376'; echo err >&2; exit 2"}, &cmd, 201)
	if cmd.Command.State != "created" {
		t.Errorf("new command state = %s, want created (started by the first attach)", cmd.Command.State)
	}
	evs := c.events(sbx.ID, cmd.Command.ID, 0)
	if evs[0].Type != "started" || evs[0].Seq != 1 || evs[0].PID == 0 {
		t.Errorf("first event = %+v", evs[0])
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Errorf("seq %d follows %d", evs[i].Seq, evs[i-1].Seq)
		}
	}
	exit := lastEvent(t, evs)
	if exit.Type != "exit" || exit.ExitCode == nil || *exit.ExitCode != 2 || exit.Reason != "exited" {
		t.Errorf("last event = %+v", exit)
	}
	if !strings.Contains(stdoutOf(evs), "line1\nline2\nline3\n") {
		t.Errorf("stdout = %q", stdoutOf(evs))
	}
	var sawB64 bool
	for _, ev := range evs {
		if len(ev.DataB64) > 0 && bytes.Contains(ev.DataB64, []byte{0xff, 0xfe}) {
			sawB64 = true
		}
	}
	if !sawB64 {
		t.Errorf("non-UTF-8 bytes did not come as data_b64: %+v", evs)
	}
	// Reattach with after: only what came later, the same events again.
	replay := c.events(sbx.ID, cmd.Command.ID, 2)
	if len(replay) != len(evs)-2 || replay[0].Seq != 3 {
		t.Errorf("replay after 2 = %d events starting %+v, want %d from seq 3", len(replay), replay[0], len(evs)-2)
	}
	var got apiv1.CommandResponse
	c.mustDo("GET", "/v1/sandboxes/"+sbx.ID+"/commands/"+cmd.Command.ID, nil, &got, 200)
	if got.Command.State != "exited" || got.Command.Exit == nil || *got.Command.Exit.ExitCode != 2 {
		t.Errorf("command after exit = %+v", got.Command)
	}
	var list apiv1.CommandList
	c.mustDo("GET", "/v1/sandboxes/"+sbx.ID+"/commands", nil, &list, 200)
	if len(list.Commands) == 0 {
		t.Error("command list is empty")
	}
}

func testCommandSSE(t *testing.T, c *client, sbx apiv1.Sandbox) {
	var cmd apiv1.CommandResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/commands", map[string]any{"argv": []string{"echo", "sse"}}, &cmd, 201)
	resp := c.request("GET", "/v1/sandboxes/"+sbx.ID+"/commands/"+cmd.Command.ID+"/events", nil,
		map[string]string{"Accept": "text/event-stream"})
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type = %q", ct)
	}
	var ids []string
	var datas []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id:"):
			ids = append(ids, strings.TrimSpace(strings.TrimPrefix(line, "id:")))
		case strings.HasPrefix(line, "data:"):
			datas = append(datas, strings.TrimSpace(strings.TrimPrefix(line, "data:")))
		}
	}
	if len(ids) < 3 || ids[0] != "1" {
		t.Errorf("SSE ids = %v", ids)
	}
	var last apiv1.Event
	if len(datas) == 0 || json.Unmarshal([]byte(datas[len(datas)-1]), &last) != nil || last.Type != "exit" {
		t.Errorf("SSE data = %v", datas)
	}
}

func testCommandStdinSignal(t *testing.T, c *client, sbx apiv1.Sandbox) {
	base := "/v1/sandboxes/" + sbx.ID + "/commands/"
	var cmd apiv1.CommandResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/commands", map[string]any{"argv": []string{"cat"}, "stdin": true}, &cmd, 201)
	done := make(chan []apiv1.Event)
	go func() { done <- c.events(sbx.ID, cmd.Command.ID, 0) }()
	waitState(t, c, sbx.ID, cmd.Command.ID, "running")
	resp := c.request("POST", base+cmd.Command.ID+"/stdin?eof=true", strings.NewReader("piped bytes"), nil)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("stdin = %d", resp.StatusCode)
	}
	evs := <-done
	if stdoutOf(evs) != "piped bytes" || *lastEvent(t, evs).ExitCode != 0 {
		t.Errorf("cat with stdin: %+v", evs)
	}

	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/commands", map[string]any{"argv": []string{"sleep", "600"}}, &cmd, 201)
	go func() { done <- c.events(sbx.ID, cmd.Command.ID, 0) }()
	waitState(t, c, sbx.ID, cmd.Command.ID, "running")
	if st := c.do("POST", base+cmd.Command.ID+"/signal", map[string]string{"signal": "SIGTERM"}, nil); st/100 != 2 {
		t.Fatalf("signal = %d", st)
	}
	exit := lastEvent(t, <-done)
	if exit.Reason != "signaled" || exit.Signal == nil || *exit.Signal != "SIGTERM" || exit.ExitCode != nil {
		t.Errorf("after SIGTERM: %+v", exit)
	}
	if st := c.do("POST", base+cmd.Command.ID+"/signal", map[string]string{"signal": "SIGNOPE"}, nil); st != 400 {
		t.Errorf("unknown signal = %d, want 400", st)
	}

	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/commands", map[string]any{"argv": []string{"sh"}, "stdin": true, "pty": map[string]int{"rows": 24, "cols": 80}}, &cmd, 201)
	go func() { done <- c.events(sbx.ID, cmd.Command.ID, 0) }()
	waitState(t, c, sbx.ID, cmd.Command.ID, "running")
	if st := c.do("POST", base+cmd.Command.ID+"/resize", map[string]int{"rows": 33, "cols": 99}, nil); st/100 != 2 {
		t.Errorf("resize = %d", st)
	}
	resp = c.request("POST", base+cmd.Command.ID+"/stdin", strings.NewReader("stty size; exit\n"), nil)
	resp.Body.Close()
	if out := stdoutOf(<-done); !strings.Contains(out, "33 99") {
		t.Errorf("pty output after resize: %q", out)
	}
}

func waitState(t *testing.T, c *client, sbx, cmd, want string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() error {
		var got apiv1.CommandResponse
		c.mustDo("GET", "/v1/sandboxes/"+sbx+"/commands/"+cmd, nil, &got, 200)
		if got.Command.State != want {
			return fmt.Errorf("command %s stays %s, want %s", cmd, got.Command.State, want)
		}
		return nil
	})
}

func testCommandTimeout(t *testing.T, c *client, sbx apiv1.Sandbox) {
	var cmd apiv1.CommandResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/commands", map[string]any{"shell": "sleep 300 & sleep 300", "timeout_seconds": 1}, &cmd, 201)
	exit := lastEvent(t, c.events(sbx.ID, cmd.Command.ID, 0))
	if exit.Reason != "timeout" {
		t.Errorf("exit = %+v, want reason timeout", exit)
	}
	var res apiv1.ExecResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/exec", map[string]any{"shell": "ps | grep -c '[s]leep 300' || true"}, &res, 200)
	if strings.TrimSpace(res.Stdout) != "0" {
		t.Errorf("sleeps left after a timeout: %q", res.Stdout)
	}
}

func testFiles(t *testing.T, c *client, sbx apiv1.Sandbox) {
	base := "/v1/sandboxes/" + sbx.ID + "/files"
	payload := bytes.Repeat([]byte{0, 1, 2, 250}, 100000)
	resp := c.request("PUT", base+"?path=/root/up/data.bin&mode=0640", bytes.NewReader(payload), map[string]string{"Content-Type": "application/octet-stream"})
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT file = %d", resp.StatusCode)
	}
	resp = c.request("GET", base+"?path=/root/up/data.bin", nil, nil)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, payload) {
		t.Errorf("GET file = %d, %d bytes (want %d)", resp.StatusCode, len(got), len(payload))
	}
	var list []apiv1.FileInfo
	c.mustDo("GET", base+"/list?path=/root/up", nil, &list, 200)
	if len(list) != 1 || list[0].Name != "data.bin" || list[0].Mode != "0640" || list[0].Size != int64(len(payload)) {
		t.Errorf("list = %+v", list)
	}
	// A directory as tar, out and back in elsewhere.
	resp = c.request("GET", base+"?path=/root/up&format=tar", nil, nil)
	tarball, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET tar = %d", resp.StatusCode)
	}
	resp = c.request("PUT", base+"?path=/root/copy&format=tar", bytes.NewReader(tarball), map[string]string{"Content-Type": "application/x-tar"})
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT tar = %d", resp.StatusCode)
	}
	var res apiv1.ExecResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/exec", map[string]any{"shell": "find /root/copy -type f | sort; cmp /root/copy/data.bin /root/up/data.bin && echo same"}, &res, 200)
	if !strings.Contains(res.Stdout, "same") {
		t.Errorf("tar round trip: %q %q", res.Stdout, res.Stderr)
	}
	// A tar that climbs out of its directory is refused.
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "../../etc/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.Close()
	resp = c.request("PUT", base+"?path=/root/jail&format=tar", &evil, map[string]string{"Content-Type": "application/x-tar"})
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("tar with ../ = %d, want 400", resp.StatusCode)
	}
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/exec", map[string]any{"shell": "test -e /etc/evil && echo escaped || echo contained"}, &res, 200)
	if strings.TrimSpace(res.Stdout) != "contained" {
		t.Errorf("tar escape: %q", res.Stdout)
	}
	for _, bad := range []string{"relative/path", ""} {
		if st := c.do("GET", base+"?path="+bad, nil, nil); st != 400 {
			t.Errorf("GET path %q = %d, want 400", bad, st)
		}
	}
	if st := c.do("GET", base+"?path=/no/such/file", nil, nil); st != 404 {
		t.Errorf("GET missing file = %d, want 404", st)
	}
	if st := c.do("DELETE", base+"?path=/root/up", nil, nil); st == 200 || st == 204 {
		t.Errorf("DELETE non-empty dir without recursive = %d, want an error", st)
	}
	if st := c.do("DELETE", base+"?path=/root/up&recursive=true", nil, nil); st/100 != 2 {
		t.Errorf("DELETE recursive = %d", st)
	}
	if st := c.do("GET", base+"/list?path=/root/up", nil, nil); st != 404 {
		t.Errorf("list after delete = %d, want 404", st)
	}
}

func testErrors(t *testing.T, srv *server, sbx apiv1.Sandbox) {
	c := srv.client(srv.AdminKey)
	type errBody struct{ Error apiv1.Error }
	check := func(name string, status int, body errBody, wantStatus int, wantCode string) {
		t.Helper()
		if status != wantStatus || body.Error.Code != wantCode || body.Error.Message == "" {
			t.Errorf("%s = %d %+v, want %d %s", name, status, body.Error, wantStatus, wantCode)
		}
		if strings.Contains(body.Error.Message, srv.dataDir) || strings.Contains(body.Error.Message, "goroutine") {
			t.Errorf("%s leaks internals: %q", name, body.Error.Message)
		}
	}
	var b errBody
	check("no key", srv.client("").do("GET", "/v1/sandboxes", nil, &b), b, 401, "unauthenticated")
	b = errBody{}
	check("bad key", srv.client("space_nope").do("GET", "/v1/sandboxes", nil, &b), b, 401, "unauthenticated")
	b = errBody{}
	check("unknown sandbox", c.do("GET", "/v1/sandboxes/sbx_nope", nil, &b), b, 404, "not_found")
	b = errBody{}
	check("bad field", c.do("POST", "/v1/sandboxes", map[string]any{"template": "base", "vcpus": 999}, &b), b, 400, "invalid_argument")
	if b.Error.Details == nil {
		t.Errorf("validation error has no field details: %+v", b.Error)
	}
	b = errBody{}
	check("unknown field", c.do("POST", "/v1/sandboxes", map[string]any{"template": "base", "colour": "red"}, &b), b, 400, "invalid_argument")
	b = errBody{}
	check("unknown template", c.do("POST", "/v1/sandboxes", map[string]any{"template": "nope"}, &b), b, 404, "not_found")
	b = errBody{}
	tenant := srv.client(newTenantKey(t, srv, "quota-tenant"))
	check("over quota", tenant.do("POST", "/v1/sandboxes", map[string]any{"template": "base", "memory_mib": 4096}, &b), b, 429, "resource_exhausted")
	resp := c.request("POST", "/v1/sandboxes", strings.NewReader("{not json"), nil)
	json.NewDecoder(resp.Body).Decode(&b)
	resp.Body.Close()
	check("invalid JSON", resp.StatusCode, b, 400, "invalid_argument")
	big := `{"template":"base","metadata":{"k":"` + strings.Repeat("x", 2<<20) + `"}}`
	resp = c.request("POST", "/v1/sandboxes", strings.NewReader(big), nil)
	b = errBody{}
	json.NewDecoder(resp.Body).Decode(&b)
	resp.Body.Close()
	check("oversized body", resp.StatusCode, b, 413, "payload_too_large")
	b = errBody{}
	check("wake a running sandbox", c.do("POST", "/v1/sandboxes/"+sbx.ID+"/wake", map[string]any{}, &b), b, 409, "conflict")
	if b.Error.Details["state"] != "running" {
		t.Errorf("409 details = %v, want state running", b.Error.Details)
	}
	if rid := c.request("GET", "/v1/sandboxes", nil, nil).Header.Get("X-Request-Id"); rid == "" {
		t.Error("no X-Request-Id on a response")
	}
}

// newTenantKey creates a tenant and returns a key of it.
func newTenantKey(t *testing.T, srv *server, name string) string {
	t.Helper()
	admin := srv.client(srv.AdminKey)
	admin.mustDo("POST", "/v1/admin/tenants", map[string]string{"name": name}, nil, 201)
	var key struct {
		Key string `json:"key"`
	}
	admin.mustDo("POST", "/v1/admin/tenants/"+name+"/keys", map[string]any{}, &key, 201)
	if !strings.HasPrefix(key.Key, "space_") {
		t.Fatalf("new key = %q", key.Key)
	}
	return key.Key
}

func testTenantIsolation(t *testing.T, srv *server, sbx apiv1.Sandbox) {
	other := srv.client(newTenantKey(t, srv, "other-tenant"))
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/sandboxes/" + sbx.ID},
		{"DELETE", "/v1/sandboxes/" + sbx.ID},
		{"POST", "/v1/sandboxes/" + sbx.ID + "/exec"},
		{"GET", "/v1/sandboxes/" + sbx.ID + "/files?path=/etc/passwd"},
		{"GET", "/v1/sandboxes/" + sbx.ID + "/commands"},
	} {
		var body any
		if r.method == "POST" {
			body = map[string]any{"argv": []string{"true"}}
		}
		if st := other.do(r.method, r.path, body, nil); st != 404 {
			t.Errorf("other tenant %s %s = %d, want 404", r.method, r.path, st)
		}
	}
	var list apiv1.SandboxList
	other.mustDo("GET", "/v1/sandboxes", nil, &list, 200)
	if len(list.Sandboxes) != 0 {
		t.Errorf("other tenant lists %d sandboxes", len(list.Sandboxes))
	}
	if st := other.do("POST", "/v1/admin/tenants", map[string]string{"name": "x"}, nil); st != 403 {
		t.Errorf("tenant key on an admin route = %d, want 403", st)
	}
	admin := srv.client(srv.AdminKey)
	var workers apiv1.WorkerList
	admin.mustDo("GET", "/v1/admin/workers", nil, &workers, 200)
	if len(workers.Workers) != 1 || workers.Workers[0].State != apiv1.WorkerReady {
		t.Errorf("workers = %+v", workers)
	}
	// A deleted key stops working at once.
	var k apiv1.KeyResponse
	admin.mustDo("POST", "/v1/admin/tenants/other-tenant/keys", map[string]any{}, &k, 201)
	if st := srv.client(k.Key).do("GET", "/v1/sandboxes", nil, nil); st != 200 {
		t.Fatalf("new key = %d", st)
	}
	admin.mustDo("DELETE", "/v1/admin/keys/"+k.ID, nil, nil, 204)
	if st := srv.client(k.Key).do("GET", "/v1/sandboxes", nil, nil); st != 401 {
		t.Errorf("deleted key = %d, want 401", st)
	}
}

func testIdempotency(t *testing.T, c *client, sbx apiv1.Sandbox) {
	path := "/v1/sandboxes/" + sbx.ID + "/commands"
	key := map[string]string{"Idempotency-Key": fmt.Sprintf("e2e-%d", time.Now().UnixNano())}
	var first, second apiv1.CommandResponse
	st1, _ := c.doHeaders("POST", path, map[string]any{"argv": []string{"true"}}, &first, key)
	st2, _ := c.doHeaders("POST", path, map[string]any{"argv": []string{"true"}}, &second, key)
	if st1 != 201 || st2 != 201 || first.Command.ID == "" || first.Command.ID != second.Command.ID {
		t.Errorf("repeat with the same key: %d %s, %d %s", st1, first.Command.ID, st2, second.Command.ID)
	}
	st3, _ := c.doHeaders("POST", path, map[string]any{"argv": []string{"false"}}, nil, key)
	if st3 != 409 {
		t.Errorf("same key, other body = %d, want 409", st3)
	}
}

func testOperations(t *testing.T, c *client, sbx apiv1.Sandbox) {
	var list apiv1.OperationList
	c.mustDo("GET", "/v1/operations?target="+sbx.ID, nil, &list, 200)
	if len(list.Operations) == 0 || list.Operations[len(list.Operations)-1].Type != "create" {
		t.Errorf("operations of %s = %+v", sbx.ID, list.Operations)
	}
	if st := c.do("GET", "/v1/operations/op_nope", nil, nil); st != 404 {
		t.Errorf("unknown operation = %d", st)
	}
	// Cancel is best effort: a finished operation stays as it ended.
	create := list.Operations[len(list.Operations)-1]
	var after apiv1.Operation
	c.mustDo("POST", "/v1/operations/"+create.ID+"/cancel", map[string]any{}, &after, 200)
	if after.State != "succeeded" {
		t.Errorf("cancel of a finished operation changed it to %s", after.State)
	}
	if st := c.do("POST", "/v1/operations/op_nope/cancel", map[string]any{}, nil); st != 404 {
		t.Errorf("cancel of an unknown operation = %d", st)
	}
}

func testDelete(t *testing.T, c *client, sbx apiv1.Sandbox) {
	// A command still running when its sandbox is deleted ends sandbox_deleted.
	var cmd apiv1.CommandResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/commands", map[string]any{"argv": []string{"sleep", "600"}}, &cmd, 201)
	done := make(chan []apiv1.Event)
	go func() { done <- c.events(sbx.ID, cmd.Command.ID, 0) }()
	waitState(t, c, sbx.ID, cmd.Command.ID, "running")
	c.deleteSandbox(sbx.ID)
	select {
	case evs := <-done:
		if ex := lastEvent(t, evs); ex.Type != "exit" || ex.Reason != "sandbox_deleted" {
			t.Errorf("stream of a command in a deleted sandbox ended with %+v", ex)
		}
	case <-time.After(time.Minute):
		t.Error("event stream did not end after delete")
	}
	var got apiv1.Sandbox
	c.mustDo("GET", "/v1/sandboxes/"+sbx.ID, nil, &got, 200)
	if got.State != "deleted" {
		t.Errorf("state after delete = %s", got.State)
	}
	var b struct{ Error apiv1.Error }
	if st := c.do("POST", "/v1/sandboxes/"+sbx.ID+"/exec", map[string]any{"argv": []string{"true"}}, &b); st != 409 {
		t.Errorf("exec in a deleted sandbox = %d, want 409", st)
	}
	if pids := vmmPIDs(sbx.ID); len(pids) > 0 {
		t.Errorf("VMM of deleted sandbox still runs: %v", pids)
	}
	_ = http.StatusOK
}
