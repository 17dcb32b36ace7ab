package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type inner struct {
	Type  string   `json:"type"`
	Items []string `json:"items,omitempty"`
}

type embedded struct {
	Argv []string `json:"argv,omitempty"`
}

type doc struct {
	embedded
	Name    string            `json:"name"`
	Count   int               `json:"count,omitempty"`
	On      bool              `json:"on,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Source  inner             `json:"source"`
	List    []inner           `json:"list,omitempty"`
	Opt     *inner            `json:"opt,omitempty"`
	Raw     json.RawMessage   `json:"raw,omitempty"`
	private int
}

// TestMessages: every way a document can fail names the field as the API
// spells it and what was expected, never a Go type.
func TestMessages(t *testing.T) {
	for _, tc := range []struct {
		in, field, problem string
	}{
		{`[]`, "", "must be a JSON object, not an array"},
		{`"x"`, "", "must be a JSON object, not a string"},
		{`7`, "", "must be a JSON object, not a number"},
		{`{"name":1}`, "name", "must be a string, not a number"},
		{`{"count":"1"}`, "count", "must be an integer, not a string"},
		{`{"count":1.5}`, "count", "must be an integer, not 1.5"},
		{`{"count":1e99}`, "count", "must be an integer, not 1e99"},
		{`{"on":"yes"}`, "on", "must be true or false, not a string"},
		{`{"env":[]}`, "env", "must be an object of strings, not an array"},
		{`{"env":{"A":1}}`, "env", "must be an object of strings, not a number"},
		{`{"argv":"ls"}`, "argv", "must be an array of strings, not a string"},
		{`{"argv":[true]}`, "argv", "must be an array of strings, not a boolean"},
		{`{"source":[]}`, "source", "must be a JSON object, not an array"},
		{`{"source":{"type":{}}}`, "source.type", "must be a string, not an object"},
		{`{"source":{"items":{}}}`, "source.items", "must be an array of strings, not an object"},
		{`{"list":{}}`, "list", "must be an array of objects, not an object"},
		{`{"list":[{"type":2}]}`, "list.type", "must be a string, not a number"},
		{`{"opt":{"type":false}}`, "opt.type", "must be a string, not a boolean"},
		{`{"nope":1}`, "nope", "is not a known field"},
		{`{"source":{"nope":1}}`, "source.nope", "is not a known field"},
		{`{"list":[{"type":"a"},{"nope":1}]}`, "list[1].nope", "is not a known field"},
		{`{"private":1}`, "private", "is not a known field"},
		{`{"name":"a"`, "", "is truncated JSON"},
		{`{"name":}`, "", "is malformed JSON at offset 9"},
		{`{"name":"a"} {}`, "", "must hold a single JSON value"},
		{`{"name":"a"} x`, "", "must hold a single JSON value"},
		{``, "", "is truncated JSON"},
	} {
		var v doc
		err := Decode([]byte(tc.in), &v)
		var se *Error
		if !errors.As(err, &se) {
			t.Errorf("%s: got %v, want an *Error", tc.in, err)
			continue
		}
		if se.Field != tc.field || se.Problem != tc.problem {
			t.Errorf("%s: got field %q problem %q, want %q %q", tc.in, se.Field, se.Problem, tc.field, tc.problem)
		}
		if msg := se.Error(); strings.Contains(msg, "Go ") || strings.Contains(msg, "strictjson") || strings.Contains(msg, "embedded") {
			t.Errorf("%s: message %q names Go types", tc.in, msg)
		}
	}
}

func TestDecodes(t *testing.T) {
	var v doc
	in := `{"argv":["ls","-l"],"name":"n","count":3,"env":{"A":"b"},"source":{"type":"oci"},"list":[{"type":"x"}],"raw":[1,2]}`
	if err := Decode([]byte(in), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Argv) != 2 || v.Name != "n" || v.Count != 3 || v.Env["A"] != "b" || v.Source.Type != "oci" || len(v.List) != 1 || string(v.Raw) != "[1,2]" {
		t.Fatalf("decoded %+v", v)
	}
	var raw json.RawMessage
	if err := Decode([]byte(` [] `), &raw); err != nil || string(raw) != "[]" {
		t.Fatalf("raw: %s %v", raw, err)
	}
}
