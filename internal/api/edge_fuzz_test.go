package api

// Fuzz targets for the edge decoders and validators (issue 9, "suites that
// keep these found"). Each asserts what the edge promises: no panic, a bad
// input is an invalid-argument error (a 4xx, never a 5xx) naming its
// fields without Go types, and a good input survives a round trip through
// its JSON form unchanged. Seeds, including the inputs of defects 8, 11 and
// 12, are in testdata/fuzz/<FuzzName>/.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
)

// fuzzServer is a Server with default limits (and its Service, whose
// limits the validators read too).
func fuzzServer(t testing.TB) *Server { return newEnv(t, Config{}).srv }

// validateCreate is the validation POST /v1/sandboxes runs: the edge's
// (the template reference), then the Service's, which compacts the
// network policy (written back into req).
func validateCreate(s *Server, req *apiv1.CreateSandboxRequest) error {
	in := createRequest(req)
	if err := s.validateCreate(req, &in); err != nil {
		return err
	}
	if err := s.svc.ValidateCreate(&in, nil); err != nil {
		return err
	}
	req.Network = in.Network
	return nil
}

func bodyRequest(data []byte) *http.Request {
	r := httptest.NewRequest("POST", "/", bytes.NewReader(data))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// wantInvalid fails unless err is the API's 400 with named fields (or a
// 403 when allow403) and says nothing of Go types.
func wantInvalid(t *testing.T, err error, allow403 bool) {
	t.Helper()
	status, info := errorInfo(err)
	if allow403 && status == http.StatusForbidden {
		return
	}
	if status != http.StatusBadRequest || info.Code != errdefs.ErrInvalidArgument.Code() {
		t.Fatalf("error %v is %d %s, want 400 invalid_argument", err, status, info.Code)
	}
	fields, _ := info.Details["fields"].(map[string]string)
	if len(fields) == 0 {
		t.Fatalf("error %q names no field (details %v)", info.Message, info.Details)
	}
	// Field names may echo the input's keys; the words around them are
	// ours and must name no Go type.
	msg := info.Message
	for field, why := range fields {
		if goTypeRE.MatchString(why) {
			t.Fatalf("%s: %q names Go types", field, why)
		}
		msg = strings.ReplaceAll(msg, field, "")
	}
	if goTypeRE.MatchString(msg) {
		t.Fatalf("message %q names Go types", info.Message)
	}
}

// FuzzSandboxSpec: the body of POST /v1/sandboxes (decodeJSON, then
// validateCreate with its network policy).
func FuzzSandboxSpec(f *testing.F) {
	f.Add([]byte(`{"template":"base","vcpus":2,"memory_mib":512,"env":{"A":"b"},"metadata":{"k":"v"},"network":{"egress":{"allow":["pypi.org"]}}}`))
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req apiv1.CreateSandboxRequest
		if err := decodeJSON(bodyRequest(data), &req, false); err != nil {
			wantInvalid(t, err, false)
			return
		}
		if err := validateCreate(s, &req); err != nil {
			wantInvalid(t, err, false)
			return
		}
		for k, v := range req.Env {
			if strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("env %q=%q with NUL passed", k, v)
			}
		}
		// Valid: what was accepted, sent again, is accepted as the same.
		once, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var again apiv1.CreateSandboxRequest
		if err := decodeJSON(bodyRequest(once), &again, false); err != nil {
			t.Fatalf("re-decode %s: %v", once, err)
		}
		if err := validateCreate(s, &again); err != nil {
			t.Fatalf("re-validate %s: %v", once, err)
		}
		if twice, _ := json.Marshal(again); !bytes.Equal(once, twice) {
			t.Fatalf("round trip changed the spec:\n%s\n%s", once, twice)
		}
	})
}

// FuzzCommandSpec: the body of POST …/exec and …/commands (decodeJSON,
// then the domain's sandbox.ValidateSpec); an accepted spec holds nothing execve refuses.
func FuzzCommandSpec(f *testing.F) {
	f.Add([]byte(`{"argv":["ls","-l"],"cwd":"/tmp","env":{"A":"b"},"timeout_seconds":5}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var req apiv1.ExecRequest
		if err := decodeJSON(bodyRequest(data), &req, false); err != nil {
			wantInvalid(t, err, false)
			return
		}
		if err := sandbox.ValidateSpec(processSpec(&req.CreateCommandRequest)); err != nil {
			wantInvalid(t, err, false)
			return
		}
		c := req.CreateCommandRequest
		all := append([]string{c.Shell, c.Cwd, c.User}, c.Argv...)
		for k, v := range c.Env {
			all = append(all, k, v)
		}
		for _, s := range all {
			if strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("accepted a NUL byte: %q", s)
			}
		}
		if (len(c.Argv) == 0) == (c.Shell == "") || (len(c.Argv) > 0 && c.Argv[0] == "") {
			t.Fatalf("accepted argv %q shell %q", c.Argv, c.Shell)
		}
		if c.Cwd != "" && !path.IsAbs(c.Cwd) {
			t.Fatalf("accepted cwd %q", c.Cwd)
		}
		// The spec stored for the agent decodes back to the same spec.
		spec := processSpec(&c)
		spec.ID = "cmd_x"
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		var back apiv1.CreateCommandRequest
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(back.Argv, c.Argv) || back.Shell != c.Shell || back.Cwd != c.Cwd || back.User != c.User {
			t.Fatalf("process spec %s lost fields of %+v", b, c)
		}
	})
}

// FuzzFilePath: ?path= and ?format= of the files routes.
func FuzzFilePath(f *testing.F) {
	f.Add("/tmp/a.txt", "")
	f.Fuzz(func(t *testing.T, p, format string) {
		q := url.Values{}
		if p != "" {
			q.Set("path", p)
		}
		if format != "" {
			q.Set("format", format)
		}
		// The query goes over the wire and back, as a client sends it.
		q, err := url.ParseQuery(q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		clean, tar, err := filePath(q)
		if err != nil {
			wantInvalid(t, err, false)
			return
		}
		if !path.IsAbs(clean) || path.Clean(clean) != clean || strings.IndexByte(clean, 0) >= 0 || len(clean) > sandbox.MaxPathLen {
			t.Fatalf("accepted %q as %q", p, clean)
		}
		if tar != (format == "tar") {
			t.Fatalf("format %q read as tar=%v", format, tar)
		}
		// The cleaned path is accepted as itself.
		if again, _, err := filePath(url.Values{"path": {clean}}); err != nil || again != clean {
			t.Fatalf("clean path %q: %q %v", clean, again, err)
		}
	})
}

// FuzzPageToken: page tokens of in-memory listings round-trip; anything
// else is the one invalid page_token error, and paging never panics or
// hands out an item twice.
func FuzzPageToken(f *testing.F) {
	f.Add("/v1/secrets", "b-two", "garbage", uint8(2))
	items := []string{"a", "a\x00b", "b", "b-two", "c", "zz"}
	f.Fuzz(func(t *testing.T, listing, key, tok string, size uint8) {
		if key != "" {
			got, err := memTokenKey(listing, memToken(listing, key))
			if err != nil && len(memToken(listing, key)) <= maxPageToken {
				t.Fatalf("own token of %q %q: %v", listing, key, err)
			}
			if err == nil && got != key {
				t.Fatalf("token of %q read back as %q", key, got)
			}
		}
		if k, err := memTokenKey(listing, tok); err != nil {
			wantInvalid(t, err, false)
		} else if memToken(listing, k) != tok {
			t.Fatalf("token %q is not the one spelling of key %q", tok, k)
		}
		q := url.Values{"page_size": {strconv.Itoa(int(size))}}
		if tok != "" {
			q.Set("page_token", tok)
		}
		r := httptest.NewRequest("GET", "/v1/secrets?"+q.Encode(), nil)
		page, next, err := pageInMemory(r, items, func(s string) string { return s })
		if err != nil {
			wantInvalid(t, err, false)
			return
		}
		if len(page) > len(items) || (size > 0 && len(page) > int(size)) {
			t.Fatalf("page of %d items for size %d", len(page), size)
		}
		if next != "" {
			after, err := memTokenKey("/v1/secrets", next)
			if err != nil || after != page[len(page)-1] {
				t.Fatalf("next token %q -> %q %v, last item %q", next, after, err, page[len(page)-1])
			}
		}
	})
}

// FuzzTemplateSource: the body of POST /v1/templates (decodeJSON, then
// validateBuild for a tenant and an admin key). Only validation: no build,
// no network.
func FuzzTemplateSource(f *testing.F) {
	f.Add([]byte(`{"name":"py","source":{"type":"oci","image":"docker.io/library/python:3.12"},"defaults":{"workdir":"/srv","start_command":["python3","-m","http.server"]}}`))
	s := fuzzServer(f)
	tenant, admin := auth.Principal{TenantID: "ten_a"}, auth.Principal{TenantID: "ten_admin", Admin: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req apiv1.CreateTemplateRequest
		if err := decodeJSON(bodyRequest(data), &req, false); err != nil {
			wantInvalid(t, err, false)
			return
		}
		errTenant, errAdmin := s.validateBuild(tenant, &req), s.validateBuild(admin, &req)
		if errTenant != nil {
			// Only a setup script is the admins' alone (403).
			wantInvalid(t, errTenant, req.Source.Script != "")
		}
		if errAdmin != nil {
			wantInvalid(t, errAdmin, false)
			return
		}
		if errTenant == nil && req.Source.Script != "" {
			t.Fatalf("a tenant may send a setup script: %s", data)
		}
		src := req.Source
		for _, v := range append([]string{src.Path, src.Image, src.Suite, src.Variant, src.Script}, src.Packages...) {
			if strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("accepted a NUL byte in the source: %q", v)
			}
		}
		once, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var again apiv1.CreateTemplateRequest
		if err := decodeJSON(bodyRequest(once), &again, false); err != nil {
			t.Fatalf("re-decode %s: %v", once, err)
		}
		if err := s.validateBuild(admin, &again); err != nil {
			t.Fatalf("re-validate %s: %v", once, err)
		}
		if twice, _ := json.Marshal(again); !bytes.Equal(once, twice) {
			t.Fatalf("round trip changed the request:\n%s\n%s", once, twice)
		}
		if br := buildRequest(&again); br.Name != req.Name || br.Source.Type != src.Type {
			t.Fatalf("build request %+v of %+v", br, again)
		}
	})
}
