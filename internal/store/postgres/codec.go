package postgres

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// now is the store's clock for records: UTC, no monotonic reading.
func now() time.Time { return time.Now().UTC().Round(0) }

// norm makes t what a read returns: UTC without a monotonic reading.
func norm(t time.Time) time.Time { return t.UTC().Round(0) }

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func nullNanos(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	n := t.UnixNano()
	return &n
}

func timePtr(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := fromNanos(*n)
	return &t
}

func normPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := norm(*t)
	return &v
}

// rawText stores a json.RawMessage; empty is NULL.
func rawText(r json.RawMessage) *string {
	if len(r) == 0 {
		return nil
	}
	s := string(r)
	return &s
}

func rawFrom(s *string) json.RawMessage {
	if s == nil || *s == "" {
		return nil
	}
	return json.RawMessage(*s)
}

// jsonText stores a pointer value as JSON; nil is NULL.
func jsonText[T any](v *T) *string {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v) // plain structs of strings and ints cannot fail
	s := string(b)
	return &s
}

func jsonFrom[T any](s *string) (*T, error) {
	if s == nil || *s == "" {
		return nil, nil
	}
	v := new(T)
	if err := json.Unmarshal([]byte(*s), v); err != nil {
		return nil, fmt.Errorf("decode stored JSON: %w", errdefs.ErrDataLoss)
	}
	return v, nil
}

func mapText(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func mapFrom(s string) (map[string]string, error) {
	m := map[string]string{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("decode stored map: %w", errdefs.ErrDataLoss)
	}
	return m, nil
}

// normMap makes a nil map the empty map a read returns.
func normMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// pageSize applies the default and the cap.
func pageSize(n int) int {
	switch {
	case n <= 0:
		return store.DefaultPageSize
	case n > store.MaxPageSize:
		return store.MaxPageSize
	}
	return n
}

// cursor is a position in a (created_at, id) ordering.
type cursor struct {
	at int64
	id string
}

func encodeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at, 10) + ":" + id))
}

func decodeCursor(tok string) (*cursor, error) {
	if tok == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "invalid page_token")
	}
	at, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "invalid page_token")
	}
	return &cursor{at: n, id: id}, nil
}
