// Package strictjson decodes the JSON documents clients send (request
// bodies, network policies) strictly — one value, no unknown fields, no
// trailing data — and says what was wrong in the API's words: the field as
// the API spells it ("source.type", "egress.allow") and the JSON kind that
// was expected, never a Go type or struct name.
//
// It knows nothing of HTTP or of error classes: callers turn an *Error into
// their own invalid-argument error, under their own field prefix.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Error is a document that does not decode. Field is the path of the
// offending field from the document's root, dot-separated with JSON names;
// "" is the document itself.
type Error struct {
	Field   string
	Problem string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return "document " + e.Problem
	}
	return e.Field + ": " + e.Problem
}

// Decode decodes exactly one JSON value from data into v (a pointer),
// rejecting unknown object fields and anything after the value. Every
// failure is an *Error.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describe(err, data, reflect.TypeOf(v))
	}
	var rest json.RawMessage
	if err := dec.Decode(&rest); err != io.EOF {
		return &Error{Problem: "must hold a single JSON value"}
	}
	return nil
}

// describe turns an encoding/json error into an *Error. t is the type
// decoded into.
func describe(err error, data []byte, t reflect.Type) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &Error{Problem: fmt.Sprintf("is malformed JSON at offset %d", syn.Offset)}
	case errors.As(err, &typ):
		field, declared := apiPath(t, typ.Field)
		if declared == nil {
			declared = typ.Type
		}
		return &Error{Field: field, Problem: "must be " + expected(declared) + ", not " + got(typ.Value)}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &Error{Problem: "is truncated JSON"}
	}
	// encoding/json reports an unknown field only as text, `json: unknown
	// field "x"`, without its path; find the path by walking the document
	// alongside the type.
	if strings.HasPrefix(err.Error(), "json: unknown field ") {
		var doc any
		if json.Unmarshal(data, &doc) == nil {
			if p, ok := unknownField(deref(t), doc, ""); ok {
				return &Error{Field: p, Problem: "is not a known field"}
			}
		}
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &Error{Field: name, Problem: "is not a known field"}
	}
	return &Error{Problem: "is not valid for this request"}
}

// apiPath maps encoding/json's path of a field (JSON names, plus the Go
// names of embedded structs it passed through) to the API's path, and
// returns the field's declared type when the path resolves.
func apiPath(t reflect.Type, goPath string) (string, reflect.Type) {
	if goPath == "" {
		return "", deref(t)
	}
	var out []string
	cur := deref(t)
	for _, seg := range strings.Split(goPath, ".") {
		cur = elemStruct(cur)
		if cur == nil {
			out = append(out, seg)
			continue
		}
		if f, ok := cur.FieldByName(seg); ok && f.Anonymous {
			cur = deref(f.Type)
			continue
		}
		out = append(out, seg)
		if f, ok := jsonField(cur, seg); ok {
			cur = deref(f.Type)
		} else {
			cur = nil
		}
	}
	return strings.Join(out, "."), cur
}

// elemStruct is the struct type reached from t through pointers, slices,
// arrays and maps (encoding/json's path names no indexes or keys), or nil.
func elemStruct(t reflect.Type) reflect.Type {
	for t != nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			return t
		default:
			return nil
		}
	}
	return nil
}

// jsonField finds the field of struct t whose JSON name is name, looking
// into embedded structs as encoding/json does.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" {
			if s := deref(f.Type); s.Kind() == reflect.Struct {
				if sf, ok := jsonField(s, name); ok {
					return sf, true
				}
			}
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if strings.EqualFold(tag, name) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// unknownField finds the first object key in doc that type t has no field
// for and returns its API path.
func unknownField(t reflect.Type, doc any, prefix string) (string, bool) {
	join := func(name string) string {
		if prefix == "" {
			return name
		}
		return prefix + "." + name
	}
	switch d := doc.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			for _, k := range slices.Sorted(maps.Keys(d)) {
				v := d[k]
				f, ok := jsonField(t, k)
				if !ok {
					return join(k), true
				}
				if p, ok := unknownField(deref(f.Type), v, join(k)); ok {
					return p, true
				}
			}
		case reflect.Map:
			for _, k := range slices.Sorted(maps.Keys(d)) {
				if p, ok := unknownField(deref(t.Elem()), d[k], join(k)); ok {
					return p, true
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, v := range d {
				if p, ok := unknownField(deref(t.Elem()), v, fmt.Sprintf("%s[%d]", prefix, i)); ok {
					return p, true
				}
			}
		}
	}
	return "", false
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// expected names what a value of Go type t looks like in JSON.
func expected(t reflect.Type) string {
	t = deref(t)
	if t == reflect.TypeFor[json.RawMessage]() {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Struct:
		return "a JSON object"
	case reflect.Map:
		return "an object of " + plural(t.Elem())
	case reflect.Slice, reflect.Array:
		return "an array of " + plural(t.Elem())
	}
	return "a JSON value"
}

func plural(t reflect.Type) string {
	t = deref(t)
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integers"
	case reflect.Float32, reflect.Float64:
		return "numbers"
	case reflect.String:
		return "strings"
	case reflect.Bool:
		return "booleans"
	case reflect.Struct, reflect.Map:
		return "objects"
	case reflect.Slice, reflect.Array:
		return "arrays"
	}
	return "values"
}

// got names the JSON value encoding/json found (UnmarshalTypeError.Value:
// "array", "object", "string", "number", "bool", or "number 1e99" for a
// number out of range).
func got(v string) string {
	switch v {
	case "array", "object":
		return "an " + v
	case "string", "number":
		return "a " + v
	case "bool":
		return "a boolean"
	case "":
		return "this value"
	}
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return n
	}
	return v
}
