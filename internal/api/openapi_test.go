package api

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The committed copy of the served document. Regenerate it with
//
//	go test ./internal/api -run TestOpenAPIFile -update
const openAPIFile = "../../docs/openapi.json"

var update = flag.Bool("update", false, "rewrite docs/openapi.json from the server's document")

// servedOpenAPI is GET /openapi.json of a server with the default config.
func servedOpenAPI(t *testing.T) []byte {
	t.Helper()
	e := newEnv(t, Config{})
	status, _, body := e.do("GET", "/openapi.json", "", nil)
	if status != 200 {
		t.Fatalf("openapi.json: %d", status)
	}
	return body
}

// indented is the committed form of a document: two-space JSON, sorted keys.
func indented(t *testing.T, doc []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// TestOpenAPIValid validates the served document twice: with kin-openapi
// (which knows OpenAPI 3.1 and rejects what is 3.2-only, such as
// itemSchema, and checks Schema Objects, parameters against path templates,
// and unknown fields), and against the OpenAPI Initiative's JSON Schema of
// OpenAPI 3.1 documents (testdata/oas-3.1-schema.json, Apache-2.0, as
// github.com/pb33f/libopenapi embeds it), which kin-openapi does not apply
// (it lets a response key such as "2000" through).
func TestOpenAPIValid(t *testing.T) {
	body := servedOpenAPI(t)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(body)
	if err != nil {
		t.Fatalf("kin-openapi cannot load the document: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.IsOpenAPI32OrLater() {
		t.Fatalf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableMultiError()); err != nil {
		t.Errorf("kin-openapi: %v", err)
	}

	meta, err := os.ReadFile("testdata/oas-3.1-schema.json")
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	metaDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(meta))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("oas-3.1-schema.json", metaDoc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("oas-3.1-schema.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("not an OpenAPI 3.1 document by the OAI's schema: %v", err)
	}
}

// TestOpenAPIFile fails when docs/openapi.json is not what the server
// serves (with -update it rewrites the file instead).
func TestOpenAPIFile(t *testing.T) {
	want := indented(t, servedOpenAPI(t))
	if *update {
		if err := os.WriteFile(openAPIFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatalf("%v (create it: go test ./internal/api -run TestOpenAPIFile -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/openapi.json is stale: regenerate it with go test ./internal/api -run TestOpenAPIFile -update")
	}
}

// TestOpenAPIDescribed: every component, property, parameter and response
// says what it is, and every entry of the description tables names
// something that exists.
func TestOpenAPIDescribed(t *testing.T) {
	var d struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(servedOpenAPI(t), &d); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for name, s := range d.Components.Schemas {
		if s["description"] == nil {
			t.Errorf("schema %s: no description (typeDocs)", name)
		}
		props, _ := s["properties"].(map[string]any)
		for p, v := range props {
			seen[name+"."+p] = true
			if v.(map[string]any)["description"] == nil {
				t.Errorf("schema %s: property %s has no description (openapi_fields*.go)", name, p)
			}
		}
	}
	for key := range fieldDocs {
		if !seen[key] && !seenEmbedded(key, d.Components.Schemas) {
			t.Errorf("fieldDocs names %s, which is no property", key)
		}
	}
	for key := range typeDocs {
		if _, ok := d.Components.Schemas[key]; !ok {
			t.Errorf("typeDocs names %s, which is no schema", key)
		}
	}
	for key := range requestRequired {
		if _, ok := d.Components.Schemas[key]; !ok {
			t.Errorf("requestRequired names %s, which is no schema", key)
		}
	}
	for name, v := range schemaTypes {
		if got := componentName(reflect.TypeOf(v)); got != name {
			t.Errorf("schemaTypes[%q] is a component named %q", name, got)
		}
	}
	for p, ops := range d.Paths {
		for m, raw := range ops {
			var op struct {
				Parameters []struct{ Name, Description string }
				Responses  map[string]struct{ Description string }
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			for _, prm := range op.Parameters {
				if prm.Description == "" {
					t.Errorf("%s %s: parameter %s has no description", m, p, prm.Name)
				}
			}
			for st, r := range op.Responses {
				if r.Description == "" {
					t.Errorf("%s %s: response %s has no description", m, p, st)
				}
			}
		}
	}
}

// seenEmbedded says whether a fieldDocs key "Type.field" names a field of
// an embedded struct, which shows up in the embedding types' properties.
func seenEmbedded(key string, schemas map[string]map[string]any) bool {
	typ, field, _ := strings.Cut(key, ".")
	if _, ok := schemas[typ]; ok {
		return false
	}
	for _, s := range schemas {
		if props, ok := s["properties"].(map[string]any); ok && props[field] != nil {
			return true
		}
	}
	return false
}

// TestOpenAPIRequired pins the required fields of request bodies to the
// handlers' rules: a body with the required fields gets past validation (to
// the missing sandbox's 404, or the work itself) and matches the route's
// body schema; one without any of them is a 400 and does not match it.
func TestOpenAPIRequired(t *testing.T) {
	for name := range requestRequired {
		if componentSchemas()[name].(obj)["additionalProperties"] != false {
			t.Errorf("%s: a request body refuses unknown fields (strictjson): additionalProperties must be false", name)
		}
	}
	e := newEnv(t, Config{})
	doc, err := openapi3.NewLoader().LoadFromData(servedOpenAPI(t))
	if err != nil {
		t.Fatal(err)
	}
	matches := func(schema, body string) error {
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		return doc.Components.Schemas[schema].Value.VisitJSON(v, openapi3.EnableJSONSchema2020())
	}
	const sbx, cmd = "/v1/sandboxes/sbx_nope", "/v1/sandboxes/sbx_nope/commands/cmd_nope"
	tests := []struct {
		component, path string
		schema          string // the route's body
		admin           bool
		full            string   // the required fields only
		without         []string // bodies each leaving one out
	}{
		{"CreateSandboxRequest", "/v1/sandboxes", "CreateSandboxRequest", false, `{"template":"base"}`, []string{`{}`, `{"vcpus":1}`}},
		{"CreateSandboxRequest", "/v1/sandboxes", "CreateSandboxRequest", false, `{"from_checkpoint":"ckpt_nope"}`, nil},
		{"KeepRequest", sbx + "/keep", "KeepRequest", false, `{"timeout_seconds":60}`, []string{`{}`}},
		{"RestoreRequest", sbx + "/restore", "RestoreRequest", false, `{"checkpoint":"ckpt_nope"}`, []string{`{}`}},
		{"CreateCommandRequest", sbx + "/commands", "CreateCommandRequest", false, `{"argv":["true"]}`, []string{`{}`, `{"argv":["true"],"shell":"true"}`}},
		{"CreateCommandRequest", sbx + "/commands", "CreateCommandRequest", false, `{"shell":"true"}`, nil},
		{"PTY", sbx + "/commands", "CreateCommandRequest", false, `{"shell":"sh","pty":{"rows":24,"cols":80}}`, []string{`{"shell":"sh","pty":{"rows":24}}`, `{"shell":"sh","pty":{"cols":80}}`}},
		{"ExecRequest", sbx + "/exec", "ExecRequest", false, `{"argv":["true"]}`, []string{`{"stdin_data":"x"}`}},
		{"SignalRequest", cmd + "/signal", "SignalRequest", false, `{"signal":"SIGTERM"}`, []string{`{}`}},
		{"ResizeRequest", cmd + "/resize", "ResizeRequest", false, `{"rows":24,"cols":80}`, []string{`{"rows":24}`, `{"cols":80}`}},
		{"CreateTenantRequest", "/v1/admin/tenants", "CreateTenantRequest", true, `{"name":"zed"}`, []string{`{}`}},
		{"CreateTemplateRequest", "/v1/templates", "CreateTemplateRequest", true, `{"name":"req","source":{"type":"debian","suite":"bookworm"}}`,
			[]string{`{"source":{"type":"debian","suite":"bookworm"}}`, `{"name":"req"}`}},
		{"TemplateSource", "/v1/templates", "CreateTemplateRequest", true, `{"name":"req","source":{"type":"debian","suite":"bookworm"}}`,
			[]string{`{"name":"req","source":{"suite":"bookworm"}}`}},
		{"InjectRule", "/v1/sandboxes", "CreateSandboxRequest", false, `{"template":"base","network":{"inject":[{"domain":"example.com","header":"X-A"}]}}`,
			[]string{`{"template":"base","network":{"inject":[{"header":"X-A"}]}}`, `{"template":"base","network":{"inject":[{"domain":"example.com"}]}}`}},
	}
	for _, tt := range tests {
		t.Run(tt.component, func(t *testing.T) {
			key := e.aliceKey
			if tt.admin {
				key = e.adminKey
			}
			if status, _, body := e.do("POST", tt.path, key, []byte(tt.full)); status == 400 {
				t.Errorf("%s with the required fields only: 400 %s", tt.path, body)
			}
			if err := matches(tt.schema, tt.full); err != nil {
				t.Errorf("%s does not match schema %s: %v", tt.full, tt.schema, err)
			}
			for _, b := range tt.without {
				status, _, body := e.do("POST", tt.path, key, []byte(b))
				if status != 400 {
					t.Errorf("%s %s: %d %s, want 400", tt.path, b, status, body)
				}
				if matches(tt.schema, b) == nil {
					t.Errorf("%s matches schema %s, which the handler refuses", b, tt.schema)
				}
			}
		})
	}
}
