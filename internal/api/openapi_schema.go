package api

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/egress"
)

// The OpenAPI schemas are derived from the wire types by reflection, so the
// document cannot drift from what the server writes; what reflection cannot
// see (descriptions, enums, limits, which request fields a handler insists
// on) comes from the tables in openapi_fields*.go, and a test fails on a
// property without a description or a table entry naming no property.

type obj = map[string]any

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
)

// schemaTypes are the named schemas the routes' docs refer to. Every named
// struct reached from them becomes a component of its own too.
var schemaTypes = map[string]any{
	"Error": apiv1.ErrorBody{}, "Operation": apiv1.Operation{}, "OperationList": apiv1.OperationList{},
	"Sandbox": apiv1.Sandbox{}, "CreateSandboxRequest": apiv1.CreateSandboxRequest{},
	"SandboxAndOperation": apiv1.SandboxAndOperation{}, "OperationResponse": apiv1.OperationResponse{},
	"SandboxList": apiv1.SandboxList{}, "KeepRequest": apiv1.KeepRequest{},
	"CreateCommandRequest": apiv1.CreateCommandRequest{}, "ExecRequest": apiv1.ExecRequest{},
	"ExecResponse": apiv1.ExecResponse{}, "CommandResponse": apiv1.CommandResponse{},
	"CommandList": apiv1.CommandList{}, "Event": apiv1.Event{}, "SignalRequest": apiv1.SignalRequest{},
	"ResizeRequest": apiv1.ResizeRequest{}, "FileInfo": apiv1.FileInfo{}, "FeatureList": apiv1.FeatureList{},
	"Version": apiv1.Version{}, "CreateTenantRequest": apiv1.CreateTenantRequest{}, "TenantResponse": apiv1.TenantResponse{},
	"CreateKeyRequest": apiv1.CreateKeyRequest{}, "KeyResponse": apiv1.KeyResponse{},
	"WorkerList": apiv1.WorkerList{}, "TenantList": apiv1.TenantList{}, "KeyList": apiv1.KeyList{},
	"SetQuotasRequest": apiv1.SetQuotasRequest{}, "TenantInfoResponse": apiv1.TenantInfoResponse{}, "TemplateList": apiv1.TemplateList{},
	"Template": apiv1.Template{}, "CreateTemplateRequest": apiv1.CreateTemplateRequest{},
	"TemplateAndOperation": apiv1.TemplateAndOperation{}, "BuildLogEvent": apiv1.BuildLogEvent{},
	"PutSecretRequest": apiv1.PutSecretRequest{}, "Secret": apiv1.Secret{}, "SecretList": apiv1.SecretList{},
	"NetworkLog": apiv1.NetworkLog{},
	"Checkpoint": apiv1.Checkpoint{}, "CheckpointList": apiv1.CheckpointList{}, "CheckpointAndOperation": apiv1.CheckpointAndOperation{},
	"CreateCheckpointRequest": apiv1.CreateCheckpointRequest{}, "RestoreRequest": apiv1.RestoreRequest{},
	"NetworkPolicy": egress.Policy{}, "TemplateDefaults": apiv1.TemplateDefaults{}, "BuildResult": buildResult{},
}

// componentNames name the components whose Go type is named otherwise.
var componentNames = map[reflect.Type]string{
	reflect.TypeOf(apiv1.ErrorBody{}): "Error",
	reflect.TypeOf(apiv1.Error{}):     "ErrorDetail",
	reflect.TypeOf(egress.Policy{}):   "NetworkPolicy",
	reflect.TypeOf(egress.Egress{}):   "EgressRules",
	reflect.TypeOf(egress.Inject{}):   "InjectRule",
	reflect.TypeOf(buildResult{}):     "BuildResult",
}

func componentName(t reflect.Type) string {
	if n, ok := componentNames[t]; ok {
		return n
	}
	return t.Name()
}

// schemaGen builds components.schemas, one per named struct it meets.
type schemaGen struct{ out obj }

// schemaOf returns the JSON Schema (2020-12, as OpenAPI 3.1 uses) of t: a
// $ref for a named struct, whose component it adds.
func (g *schemaGen) schemaOf(t reflect.Type) obj {
	switch {
	case t == timeType:
		return obj{"type": "string", "format": "date-time"}
	case t == rawType:
		return obj{} // any JSON value; the fields tables say which
	}
	switch t.Kind() {
	case reflect.Pointer:
		s := g.schemaOf(t.Elem())
		if typ, ok := s["type"].(string); ok {
			s["type"] = []string{typ, "null"}
			return s
		}
		if _, ok := s["$ref"]; ok {
			return obj{"anyOf": []obj{s, {"type": "null"}}}
		}
		return s
	case reflect.String:
		return obj{"type": "string"}
	case reflect.Bool:
		return obj{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Int16, reflect.Int8:
		return obj{"type": "integer"}
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint16, reflect.Uint8:
		return obj{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return obj{"type": "number"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return obj{"type": "string", "contentEncoding": "base64"}
		}
		return obj{"type": "array", "items": g.schemaOf(t.Elem())}
	case reflect.Map:
		return obj{"type": "object", "additionalProperties": g.schemaOf(t.Elem())}
	case reflect.Struct:
		name := componentName(t)
		if _, done := g.out[name]; !done {
			g.out[name] = obj{} // placeholder: a type may refer to itself
			g.out[name] = g.structSchema(t, name)
		}
		return schemaRef(name)
	}
	return obj{}
}

// structSchema is the object schema of struct t, component name.
func (g *schemaGen) structSchema(t reflect.Type, name string) obj {
	props, omitted := obj{}, map[string]bool{}
	g.addFields(t, props, omitted)
	s := obj{"type": "object", "properties": props}
	if d := typeDocs[name]; d != "" {
		s["description"] = d
	}
	var required []string
	if req, ok := requestRequired[name]; ok {
		// A request body: the decoder takes any subset of the fields and
		// refuses unknown ones; the handler's validation says which it
		// insists on.
		required = req
		s["additionalProperties"] = false
	} else {
		// An answer: every field written without omitempty is always there.
		for p := range props {
			if !omitted[p] {
				required = append(required, p)
			}
		}
	}
	if len(required) > 0 {
		sort.Strings(required)
		s["required"] = required
	}
	for k, v := range schemaExtra[name] {
		s[k] = v
	}
	return s
}

// addFields adds t's JSON fields to props (the embedded struct's too),
// noting in omitted those written with omitempty.
func (g *schemaGen) addFields(t reflect.Type, props obj, omitted map[string]bool) {
	owner := componentName(t)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			g.addFields(f.Type, props, omitted)
			continue
		}
		if name == "" {
			name = f.Name
		}
		fd := fieldDocs[owner+"."+name]
		s := fd.schema
		if s == nil {
			s = g.schemaOf(f.Type)
		} else {
			s = cloneObj(s)
		}
		for k, v := range fd.extra {
			s[k] = v
		}
		if fd.desc != "" {
			s["description"] = fd.desc
		}
		props[name] = s
		if strings.Contains(opts, "omitempty") {
			omitted[name] = true
		}
	}
}

func cloneObj(s obj) obj {
	out := make(obj, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}

func componentSchemas() obj {
	g := &schemaGen{out: obj{}}
	for _, v := range schemaTypes {
		g.schemaOf(reflect.TypeOf(v))
	}
	for name, s := range extraSchemas {
		g.out[name] = s
	}
	return g.out
}
