package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Our own types always marshal; answer something valid regardless.
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// decodeJSON reads exactly one JSON object into v, rejecting unknown fields,
// trailing data and oversized bodies. An empty body decodes as {} when
// allowEmpty is set.
func decodeJSON(r *http.Request, v any, allowEmpty bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return invalid(map[string]string{"body": "a JSON object is required"})
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return invalid(map[string]string{"Content-Type": "must be application/json"})
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return invalid(map[string]string{"body": "must hold a single JSON object"})
	}
	var rest json.RawMessage
	if err := dec.Decode(&rest); err != io.EOF {
		return invalid(map[string]string{"body": "must hold a single JSON object"})
	}
	return nil
}

// bodyError classifies a failure to read a request body.
func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errdefs.New(errdefs.ErrPayloadTooLarge, "request body exceeds %d bytes", mbe.Limit).
			WithDetails(map[string]any{"limit_bytes": mbe.Limit})
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "could not read the request body").WithCause(err)
}

func decodeError(err error) error {
	var mbe *http.MaxBytesError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return bodyError(err)
	case errors.As(err, &syn):
		return invalid(map[string]string{"body": fmt.Sprintf("malformed JSON at offset %d", syn.Offset)})
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return invalid(map[string]string{field: "must be " + jsonKind(typ.Type.Kind().String())})
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid(map[string]string{"body": "truncated JSON"})
	}
	// encoding/json reports unknown fields only as text: `json: unknown field "x"`.
	// This is the decoder's own, stable message, not an error class.
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		name := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
		return invalid(map[string]string{name: "unknown field"})
	}
	return invalid(map[string]string{"body": "invalid JSON"})
}

func jsonKind(k string) string {
	switch k {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	}
	return "of another type"
}
