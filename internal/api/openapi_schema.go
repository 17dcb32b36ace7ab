package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// The OpenAPI schemas are derived from the apiv1 wire types by reflection,
// so the document cannot drift from what the server writes.

type obj = map[string]any

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
)

// schemaTypes are the named schemas of components.schemas.
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
	"WorkerList": apiv1.WorkerList{}, "TemplateList": apiv1.TemplateList{},
	"Template": apiv1.Template{}, "CreateTemplateRequest": apiv1.CreateTemplateRequest{},
	"TemplateAndOperation": apiv1.TemplateAndOperation{}, "BuildLogEvent": apiv1.BuildLogEvent{},
	"PutSecretRequest": apiv1.PutSecretRequest{}, "Secret": apiv1.Secret{}, "SecretList": apiv1.SecretList{},
	"NetworkLog": apiv1.NetworkLog{},
	"Checkpoint": apiv1.Checkpoint{}, "CheckpointList": apiv1.CheckpointList{}, "CheckpointAndOperation": apiv1.CheckpointAndOperation{},
	"CreateCheckpointRequest": apiv1.CreateCheckpointRequest{}, "RestoreRequest": apiv1.RestoreRequest{}, "NetworkPolicy": json.RawMessage{},
}

// schemaOf returns the JSON Schema (2020-12, as OpenAPI 3.1 uses) of t.
func schemaOf(t reflect.Type) obj {
	switch {
	case t == timeType:
		return obj{"type": "string", "format": "date-time"}
	case t == rawType:
		return obj{} // any JSON value
	}
	switch t.Kind() {
	case reflect.Pointer:
		s := schemaOf(t.Elem())
		if typ, ok := s["type"].(string); ok {
			s["type"] = []string{typ, "null"}
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
		return obj{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Map:
		return obj{"type": "object", "additionalProperties": schemaOf(t.Elem())}
	case reflect.Interface:
		return obj{}
	case reflect.Struct:
		props, required := obj{}, []string{}
		addFields(t, props, &required)
		s := obj{"type": "object", "properties": props}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	}
	return obj{}
}

func addFields(t reflect.Type, props obj, required *[]string) {
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
			addFields(f.Type, props, required)
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = schemaOf(f.Type)
		if !strings.Contains(opts, "omitempty") {
			*required = append(*required, name)
		}
	}
}

func componentSchemas() obj {
	out := obj{}
	for name, v := range schemaTypes {
		out[name] = schemaOf(reflect.TypeOf(v))
	}
	ev := out["Event"].(obj)
	ev["description"] = "One event of a command's stream. started: seq, pid, time. stdout/stderr: seq, data " +
		"(UTF-8) or data_b64 (other bytes). gap: seq (last lost), lost_bytes. exit: seq, exit_code " +
		"(null when signaled), signal (null unless signaled), reason (exited|signaled|timeout|killed|oom|" +
		"sandbox_deleted|lost). error: code, message (no seq; the stream ends; reattach with after=). " +
		`heartbeat (NDJSON only, no seq): {"type":"heartbeat"} after an idle interval; SSE sends a ": heartbeat" comment instead.`
	return out
}
