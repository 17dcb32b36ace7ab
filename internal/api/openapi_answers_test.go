package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// conformance checks requests and the server's answers against the served
// OpenAPI document with kin-openapi's openapi3filter: the request as the
// document describes it, the answer's status among the route's, its body by
// the schema of its content type. Streams are checked event by event
// against the schema their x-item-schema names.
type conformance struct {
	t      *testing.T
	e      *env
	doc    *openapi3.T
	router routers.Router
	// invalid: the request is meant not to match the document.
	invalid bool
}

func newConformance(t *testing.T, e *env) *conformance {
	_, _, body := e.do("GET", "/openapi.json", "", nil)
	doc, err := openapi3.NewLoader().LoadFromData(body)
	if err != nil {
		t.Fatal(err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range []string{"application/x-ndjson", "application/x-tar", "text/event-stream"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.FileBodyDecoder)
	}
	return &conformance{t: t, e: e, doc: doc, router: router}
}

// do sends the request, checks both sides and returns the answer.
func (c *conformance) do(method, path, key string, body []byte, hdr ...string) (int, []byte) {
	c.t.Helper()
	newReq := func() *http.Request {
		req, err := http.NewRequest(method, c.e.http.URL+path, bytes.NewReader(body))
		if err != nil {
			c.t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		return req
	}
	req := newReq()
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.t.Fatalf("%s %s: no route in the document: %v", method, path, err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(context.Background(), in); (err != nil) != c.invalid {
		c.t.Errorf("%s %s: the request matching the document is %v, want %v: %v", method, path, err == nil, !c.invalid, err)
	}
	resp, err := c.e.http.Client().Do(newReq())
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	out.SetBodyBytes(answer)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.t.Errorf("%s %s: the %d answer does not match the document: %v\n%s", method, path, resp.StatusCode, err, answer)
	}
	if ct := resp.Header.Get("Content-Type"); ct == "application/x-ndjson" {
		c.checkItems(route, resp.StatusCode, ct, answer)
	}
	return resp.StatusCode, answer
}

// checkItems validates each line of an NDJSON answer against its item schema.
func (c *conformance) checkItems(route *routers.Route, status int, ct string, answer []byte) {
	c.t.Helper()
	r := route.Operation.Responses.Status(status)
	mt := r.Value.Content.Get(ct)
	ref, _ := mt.Extensions["x-item-schema"].(map[string]any)["$ref"].(string)
	item := c.doc.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
	if item == nil {
		c.t.Fatalf("%s: no item schema for %s", route.Path, ct)
	}
	sc := bufio.NewScanner(bytes.NewReader(answer))
	for sc.Scan() {
		var v any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			c.t.Errorf("%s: line %q: %v", route.Path, sc.Text(), err)
			continue
		}
		if err := item.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			c.t.Errorf("%s: event %s does not match %s: %v", route.Path, sc.Text(), ref, err)
		}
	}
}

// wait long-polls an operation to its end and returns its result.
func (c *conformance) wait(key string, opAnswer []byte) json.RawMessage {
	c.t.Helper()
	var v struct {
		Operation struct{ ID string } `json:"operation"`
	}
	if err := json.Unmarshal(opAnswer, &v); err != nil || v.Operation.ID == "" {
		c.t.Fatalf("no operation in %s", opAnswer)
	}
	for range 10 {
		_, b := c.do("GET", "/v1/operations/"+v.Operation.ID+"?wait=30s", key, nil)
		var op struct {
			State  string
			Result json.RawMessage
		}
		json.Unmarshal(b, &op)
		switch op.State {
		case "succeeded":
			return op.Result
		case "failed", "cancelled":
			c.t.Fatalf("operation %s: %s", v.Operation.ID, b)
		}
	}
	c.t.Fatalf("operation %s did not end", v.Operation.ID)
	return nil
}

// TestOpenAPIAnswers drives every kind of answer the routes give through a
// sandbox's life and checks each against the document: so the document
// describes what the server writes, required fields included.
func TestOpenAPIAnswers(t *testing.T) {
	e := newEnv(t, Config{Features: []string{featureNetworkLog}})
	withSecrets(t, e)
	c := newConformance(t, e)
	k, admin := e.aliceKey, e.adminKey
	must := func(want int, method, path, key string, body []byte, hdr ...string) []byte {
		t.Helper()
		got, answer := c.do(method, path, key, body, hdr...)
		if got != want {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, want, answer)
		}
		return answer
	}
	for _, p := range []string{"/healthz", "/readyz", "/openapi.json", "/metrics"} {
		must(200, "GET", p, "", nil)
	}
	must(200, "GET", "/v1/features", k, nil)
	must(200, "GET", "/v1/templates", k, nil)
	must(200, "GET", "/v1/templates/base", k, nil)

	created := must(202, "POST", "/v1/sandboxes", k, []byte(`{"template":"base","metadata":{"job":"7"},"env":{"A":"1"},
		"timeout_seconds":3600,"network":{"egress":{"default":"deny","allow":["example.com"]},"inject":[{"domain":"example.com","header":"X-Key","value":"${secret:k}"}]}}`))
	c.wait(k, created)
	var sb struct {
		Sandbox struct{ ID string } `json:"sandbox"`
	}
	json.Unmarshal(created, &sb)
	id := "/v1/sandboxes/" + sb.Sandbox.ID
	must(200, "GET", id, k, nil)
	must(200, "GET", "/v1/sandboxes?state=running&metadata.job=7&page_size=1", k, nil)
	must(200, "POST", id+"/keep", k, []byte(`{"timeout_seconds":60}`))
	must(200, "PUT", id+"/network", k, []byte(`{}`))
	must(200, "GET", id+"/network/log", k, nil)

	must(200, "POST", id+"/exec", k, []byte(`{"shell":"echo hi; echo oops >&2; exit 3"}`))
	cmdAnswer := must(201, "POST", id+"/commands", k, []byte(`{"argv":["sh","-c","echo out; echo err >&2"],"timeout_seconds":60}`))
	var cmd struct{ Command struct{ ID string } }
	json.Unmarshal(cmdAnswer, &cmd)
	cid := id + "/commands/" + cmd.Command.ID
	must(200, "GET", cid+"/events", k, nil)
	must(200, "GET", cid, k, nil)
	must(200, "GET", id+"/commands", k, nil)
	c.do("POST", cid+"/signal", k, []byte(`{"signal":"SIGTERM"}`)) // 409: it has exited

	must(200, "PUT", id+"/files?path=/tmp/a.txt&mode=0600", k, []byte("hello"), "Content-Type", "application/octet-stream")
	must(200, "GET", id+"/files?path=/tmp/a.txt", k, nil)
	must(200, "GET", id+"/files/list?path=/tmp", k, nil)
	in := must(201, "POST", id+"/commands", k, []byte(`{"argv":["cat"],"stdin":true,"pty":{"rows":24,"cols":80}}`))
	json.Unmarshal(in, &cmd)
	must(204, "POST", id+"/commands/"+cmd.Command.ID+"/stdin?eof=true", k, []byte("typed\n"), "Content-Type", "application/octet-stream")
	c.do("POST", id+"/commands/"+cmd.Command.ID+"/resize", k, []byte(`{"rows":30,"cols":100}`)) // 204, or 409 once cat has exited
	must(204, "DELETE", id+"/files?path=/tmp/a.txt", k, nil)

	ck := must(202, "POST", id+"/checkpoints", k, []byte(`{"name":"one"}`))
	c.wait(k, ck)
	var ckv struct{ Checkpoint struct{ ID string } }
	json.Unmarshal(ck, &ckv)
	must(200, "GET", "/v1/checkpoints/"+ckv.Checkpoint.ID, k, nil)
	must(200, "GET", id+"/checkpoints", k, nil)
	c.wait(k, must(202, "POST", "/v1/sandboxes", k, []byte(`{"from_checkpoint":"`+ckv.Checkpoint.ID+`"}`)))
	c.wait(k, must(202, "POST", id+"/restore", k, []byte(`{"checkpoint":"`+ckv.Checkpoint.ID+`"}`)))

	c.wait(k, must(202, "POST", id+"/pause", k, nil))
	c.wait(k, must(202, "POST", id+"/suspend", k, nil))
	c.wait(k, must(202, "POST", id+"/wake", k, nil))
	must(200, "GET", "/v1/operations?target="+sb.Sandbox.ID, k, nil)
	var ops struct{ Operations []struct{ ID string } }
	json.Unmarshal(must(200, "GET", "/v1/operations?page_size=1", k, nil), &ops)
	must(200, "POST", "/v1/operations/"+ops.Operations[0].ID+"/cancel", k, nil)

	must(201, "PUT", "/v1/secrets/k", k, []byte(`{"value":"v1"}`))
	must(200, "PUT", "/v1/secrets/k", k, []byte(`{"value":"v2"}`))
	must(200, "GET", "/v1/secrets", k, nil)
	must(204, "DELETE", "/v1/secrets/k", k, nil)

	must(201, "POST", "/v1/admin/tenants", admin, []byte(`{"name":"conformance"}`))
	var key struct{ ID string }
	json.Unmarshal(must(201, "POST", "/v1/admin/tenants/conformance/keys", admin, nil), &key)
	must(200, "GET", "/v1/admin/tenants/conformance/keys", admin, nil)
	must(204, "DELETE", "/v1/admin/keys/"+key.ID, admin, nil)
	must(200, "GET", "/v1/admin/tenants/conformance/keys", admin, nil)
	must(200, "PUT", "/v1/admin/tenants/conformance/quotas", admin, []byte(`{"sandboxes":2,"memory_mib":1024}`))
	must(200, "GET", "/v1/admin/tenants", admin, nil)
	must(200, "GET", "/v1/admin/workers", admin, nil)

	// Errors answer the document's error body.
	must(404, "GET", "/v1/sandboxes/sbx_nope", k, nil)
	c.invalid = true // a request the document rules out, answered as it says
	must(400, "POST", "/v1/sandboxes", k, []byte(`{"template":"base","vcpus":-1}`))
	c.invalid = false
	must(401, "GET", "/v1/sandboxes", "", nil)

	c.wait(k, must(202, "DELETE", id, k, nil))
	must(204, "DELETE", "/v1/checkpoints/"+ckv.Checkpoint.ID, k, nil)
}

// TestOpenAPIAnswersTemplates is TestOpenAPIAnswers for template builds:
// the build, its log stream, the build result, the template and its
// deletion.
func TestOpenAPIAnswersTemplates(t *testing.T) {
	te := newTplEnv(t)
	c := newConformance(t, te.env)
	path := te.rootfsTar("conf.tar", map[string]string{"etc/hello": "hi\n"})
	st, body := c.do("POST", "/v1/templates", te.adminKey, []byte(`{"name":"conf","source":{"type":"rootfs","path":"`+path+`"},"defaults":{"memory_mib":256,"env":{"A":"1"}}}`))
	if st != 202 {
		t.Fatalf("build: %d %s", st, body)
	}
	var v struct{ Operation struct{ ID string } }
	json.Unmarshal(body, &v)
	c.wait(te.adminKey, body)
	if st, body := c.do("GET", "/v1/templates/conf/builds/"+v.Operation.ID+"/log", te.adminKey, nil); st != 200 || !bytes.Contains(body, []byte(`"type":"end"`)) {
		t.Errorf("build log: %d %s", st, body)
	}
	if st, body := c.do("GET", "/v1/templates/conf", te.adminKey, nil); st != 200 {
		t.Errorf("template: %d %s", st, body)
	}
	if st, body := c.do("DELETE", "/v1/templates/conf", te.adminKey, nil); st != 204 {
		t.Errorf("delete: %d %s", st, body)
	}
}
