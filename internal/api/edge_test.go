package api

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// goTypeRE matches what encoding/json's own messages say of Go types.
var goTypeRE = regexp.MustCompile(`Go (value|struct)|unmarshal|\b(egress|apiv1|template)\.[A-Z]|[A-Z][a-z]+Request\.`)

// TestNULRefusedAtTheEdge (issue 9, defect 8): a NUL byte in any string
// that would reach execve or a path is a 400 naming the field, never the
// 500 of a start that failed in the guest.
func TestNULRefusedAtTheEdge(t *testing.T) {
	e := newEnv(t, Config{})
	sb := e.running(e.alice, nil)
	base := "/v1/sandboxes/" + sb.ID
	for _, tc := range []struct {
		method, path, body, field string
	}{
		{"POST", base + "/exec", `{"shell":"echo a\u0000b"}`, "shell"},
		{"POST", base + "/exec", `{"argv":["echo","a\u0000b"]}`, "argv[1]"},
		{"POST", base + "/exec", `{"argv":["ec\u0000ho"]}`, "argv[0]"},
		{"POST", base + "/exec", `{"argv":["pwd"],"cwd":"/tmp\u0000"}`, "cwd"},
		{"POST", base + "/exec", `{"argv":["id"],"user":"root\u0000"}`, "user"},
		{"POST", base + "/exec", `{"argv":["env"],"env":{"A":"x\u0000y"}}`, "env.A"},
		{"POST", base + "/exec", `{"argv":["env"],"env":{"A\u0000":"x"}}`, "env.A\x00"},
		{"POST", base + "/commands", `{"shell":"\u0000"}`, "shell"},
		{"POST", base + "/commands", `{"argv":["ls","\u0000"]}`, "argv[1]"},
		{"POST", "/v1/sandboxes", `{"template":"base","env":{"A":"\u0000"}}`, "env.A"},
		{"PUT", base + "/files?path=/tmp/a%00b", `x`, "path"},
		{"GET", base + "/files?path=/tmp/a%00b", ``, "path"},
		{"GET", base + "/files/list?path=/%00", ``, "path"},
		{"DELETE", base + "/files?path=/tmp/%00", ``, "path"},
		{"GET", base + "/files?path=%00/tmp", ``, "path"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"rootfs","path":"/srv/a\u0000"}}`, "source.path"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"oci","image":"a\u0000"}}`, "source.image"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"debian","suite":"b\u0000"}}`, "source.suite"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"debian","suite":"b","packages":["ok","c\u0000"]}}`, "source.packages[1]"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"rootfs","path":"/srv/a"},"defaults":{"workdir":"/\u0000"}}`, "defaults.workdir"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"rootfs","path":"/srv/a"},"defaults":{"user":"u\u0000"}}`, "defaults.user"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"rootfs","path":"/srv/a"},"defaults":{"start_command":["a","\u0000"]}}`, "defaults.start_command[1]"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"rootfs","path":"/srv/a"},"defaults":{"ready_command":["\u0000"]}}`, "defaults.ready_command[0]"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"rootfs","path":"/srv/a"},"defaults":{"env":{"K":"\u0000"}}}`, "defaults.env.K"},
	} {
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		st, _, out := e.do(tc.method, tc.path, e.aliceKey, body)
		er := wantError(t, st, out, 400, "invalid_argument")
		fields, _ := er.Details["fields"].(map[string]any)
		if _, ok := fields[tc.field]; !ok {
			t.Errorf("%s %s %s: details %v lack field %q", tc.method, tc.path, tc.body, er.Details, tc.field)
		}
	}
}

// TestDecodeMessagesInAPIWords (issue 9, defect 11): a body of the wrong
// shape is told what was expected, with the field named as the API spells
// it and no Go type in sight.
func TestDecodeMessagesInAPIWords(t *testing.T) {
	e := newEnv(t, Config{})
	withSecrets(t, e)
	sb := e.running(e.alice, nil)
	base := "/v1/sandboxes/" + sb.ID
	for _, tc := range []struct {
		method, path, body, field, problem string
	}{
		{"PUT", base + "/network", `[]`, "network", "must be a JSON object, not an array"},
		{"PUT", base + "/network", `"deny"`, "network", "must be a JSON object, not a string"},
		{"PUT", base + "/network", `{"egress":[]}`, "network.egress", "must be a JSON object, not an array"},
		{"PUT", base + "/network", `{"egress":{"allow":"pypi.org"}}`, "network.egress.allow", "must be an array of strings, not a string"},
		{"PUT", base + "/network", `{"egress":{"deny":[1]}}`, "network.egress.deny", "must be an array of strings, not a number"},
		{"PUT", base + "/network", `{"inject":{}}`, "network.inject", "must be an array of objects, not an object"},
		{"PUT", base + "/network", `{"egress":{"proxy":true}}`, "network.egress.proxy", "is not a known field"},
		{"POST", "/v1/sandboxes", `{"template":"base","network":[]}`, "network", "must be a JSON object, not an array"},
		{"POST", "/v1/sandboxes", `[]`, "body", "must be a JSON object, not an array"},
		{"POST", "/v1/sandboxes", `{"template":"base","vcpus":"2"}`, "vcpus", "must be an integer, not a string"},
		{"POST", "/v1/sandboxes", `{"template":"base","vcpus":1e99}`, "vcpus", "must be an integer, not 1e99"},
		{"POST", "/v1/sandboxes", `{"template":"base","env":{"A":1}}`, "env", "must be an object of strings, not a number"},
		{"POST", "/v1/sandboxes", `{"template":"base","metadata":[]}`, "metadata", "must be an object of strings, not an array"},
		{"POST", base + "/exec", `{"argv":"ls"}`, "argv", "must be an array of strings, not a string"},
		{"POST", base + "/exec", `{"argv":["ls"],"stdin_data":5}`, "stdin_data", "must be a string, not a number"},
		{"POST", base + "/exec", `{"argv":["ls"],"pty":[]}`, "pty", "must be a JSON object, not an array"},
		{"POST", base + "/commands", `{"argv":["ls"],"stdin":"yes"}`, "stdin", "must be true or false, not a string"},
		{"POST", "/v1/templates", `{"name":"x","source":[]}`, "source", "must be a JSON object, not an array"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"debian","suite":"b","packages":"vim"}}`, "source.packages", "must be an array of strings, not a string"},
		{"POST", "/v1/templates", `{"name":"x","source":{"type":"oci","tag":"x"}}`, "source.tag", "is not a known field"},
		{"PUT", "/v1/secrets/k", `{"value":1}`, "value", "must be a string, not a number"},
		{"PUT", "/v1/secrets/k", `{"value":"v"} {}`, "body", "must hold a single JSON value"},
		{"PUT", "/v1/secrets/k", `{"value":`, "body", "is truncated JSON"},
	} {
		st, _, out := e.do(tc.method, tc.path, e.aliceKey, []byte(tc.body))
		er := wantError(t, st, out, 400, "invalid_argument")
		fields, _ := er.Details["fields"].(map[string]any)
		if got := fields[tc.field]; got != tc.problem {
			t.Errorf("%s %s %s: fields %v, want %s: %s", tc.method, tc.path, tc.body, fields, tc.field, tc.problem)
		}
		if goTypeRE.Match(out) {
			t.Errorf("%s %s %s: answer names Go types: %s", tc.method, tc.path, tc.body, out)
		}
	}
}

// TestPageTokenValidatedEverywhere (issue 9, defect 12): every listing
// refuses a page_token it did not hand out with the same 400, and takes
// back the tokens it did.
func TestPageTokenValidatedEverywhere(t *testing.T) {
	e := newEnv(t, Config{})
	withSecrets(t, e)
	sb := e.running(e.alice, nil)
	for _, name := range []string{"a", "b"} {
		if st, _, body := e.do("PUT", "/v1/secrets/"+name, e.aliceKey, []byte(`{"value":"v"}`)); st != 201 {
			t.Fatalf("put secret: %d %s", st, body)
		}
	}
	listings := []struct{ key, path string }{
		{e.aliceKey, "/v1/sandboxes"},
		{e.aliceKey, "/v1/operations"},
		{e.aliceKey, "/v1/templates"},
		{e.aliceKey, "/v1/secrets"},
		{e.aliceKey, "/v1/sandboxes/" + sb.ID + "/commands"},
		{e.aliceKey, "/v1/sandboxes/" + sb.ID + "/checkpoints"},
	}
	// A real token of another listing: the secrets listing's first page.
	st, _, body := e.do("GET", "/v1/secrets?page_size=1", e.aliceKey, nil)
	var sl struct {
		Next string `json:"next_page_token"`
	}
	if json.Unmarshal(body, &sl); st != 200 || sl.Next == "" {
		t.Fatalf("secrets page: %d %s", st, body)
	}
	bad := []string{"garbage", "%25%25", "AAAA", "YQ", "_-_-", strings.Repeat("A", 2000)}
	for _, l := range listings {
		for _, tok := range bad {
			st, _, body := e.do("GET", l.path+"?page_token="+tok, l.key, nil)
			er := wantError(t, st, body, 400, "invalid_argument")
			if er.Message != "invalid page_token" {
				t.Errorf("%s page_token=%.20s: message %q", l.path, tok, er.Message)
			}
		}
		if l.path != "/v1/secrets" {
			st, _, body := e.do("GET", l.path+"?page_token="+sl.Next, l.key, nil)
			wantError(t, st, body, 400, "invalid_argument")
		}
	}
	st, _, body = e.do("GET", "/v1/secrets?page_size=1&page_token="+sl.Next, e.aliceKey, nil)
	if st != 200 || !strings.Contains(string(body), `"name":"b"`) {
		t.Fatalf("second secrets page: %d %s", st, body)
	}
}
