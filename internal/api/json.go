package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/strictjson"
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

// decodeJSON reads exactly one JSON value into v, rejecting unknown fields,
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
	if err := strictjson.Decode(body, v); err != nil {
		return decodeError(err)
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

// decodeError turns a strictjson error into the API's 400 naming the
// field; a problem with the document as a whole is the body's.
func decodeError(err error) error {
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return invalid(map[string]string{"body": "invalid JSON"})
	}
	field := se.Field
	if field == "" {
		field = "body"
	}
	return invalid(map[string]string{field: se.Problem})
}
