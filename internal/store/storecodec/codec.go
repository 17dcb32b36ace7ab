package storecodec

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Row is what a driver's single row and row cursor share: pgx.Row, pgx.Rows,
// *sql.Row and *sql.Rows all have it.
type Row interface {
	Scan(dest ...any) error
}

// Now is the stores' clock for records: UTC, no monotonic reading, so a
// value written and read back compares equal.
func Now() time.Time { return time.Now().UTC().Round(0) }

// Norm makes t what a read returns: UTC without a monotonic reading.
func Norm(t time.Time) time.Time { return t.UTC().Round(0) }

// NormPtr is Norm for an optional time; nil stays nil.
func NormPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := Norm(*t)
	return &v
}

// Nanos is how a time is stored: nanoseconds since the Unix epoch, which
// round-trip exactly.
func Nanos(t time.Time) int64 { return t.UnixNano() }

// FromNanos reads a stored time back, in UTC.
func FromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// NullNanos stores an optional time; nil is NULL.
func NullNanos(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	n := t.UnixNano()
	return &n
}

// TimePtr reads an optional time back; NULL is nil.
func TimePtr(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := FromNanos(*n)
	return &t
}

// RawText stores a json.RawMessage; empty is NULL.
func RawText(r json.RawMessage) *string {
	if len(r) == 0 {
		return nil
	}
	s := string(r)
	return &s
}

// RawFrom reads a json.RawMessage back; NULL and empty are nil.
func RawFrom(s *string) json.RawMessage {
	if s == nil || *s == "" {
		return nil
	}
	return json.RawMessage(*s)
}

// JSONText stores a pointer value as JSON; nil is NULL.
func JSONText[T any](v *T) *string {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v) // plain structs of strings and ints cannot fail
	s := string(b)
	return &s
}

// JSONFrom reads a value JSONText stored; NULL and empty are nil. Text that
// does not decode is data loss, not the caller's mistake.
func JSONFrom[T any](s *string) (*T, error) {
	if s == nil || *s == "" {
		return nil, nil
	}
	v := new(T)
	if err := json.Unmarshal([]byte(*s), v); err != nil {
		return nil, fmt.Errorf("decode stored JSON: %w", errdefs.ErrDataLoss)
	}
	return v, nil
}

// MapText stores a string map as a JSON object; nil is the empty object.
func MapText(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// MapFrom reads a map MapText stored; never nil.
func MapFrom(s string) (map[string]string, error) {
	m := map[string]string{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("decode stored map: %w", errdefs.ErrDataLoss)
	}
	return m, nil
}

// NormMap makes a nil map the empty map a read returns.
func NormMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
