package storecodec

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// PageSize applies the default and the cap to a requested page size.
func PageSize(n int) int {
	switch {
	case n <= 0:
		return store.DefaultPageSize
	case n > store.MaxPageSize:
		return store.MaxPageSize
	}
	return n
}

// Cursor is a position in a (created_at, id) ordering: the last row of a
// page, after which the next page starts.
type Cursor struct {
	At int64 // created_at, as Nanos stores it
	ID string
}

// EncodeCursor makes the opaque page token of a position.
func EncodeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at, 10) + ":" + id))
}

// DecodeCursor reads a page token; empty is the first page (nil). A token
// this package did not make is the caller's mistake.
func DecodeCursor(tok string) (*Cursor, error) {
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
	return &Cursor{At: n, ID: id}, nil
}

// Rows is what a driver's row cursor shares: pgx.Rows and *sql.Rows.
type Rows interface {
	Row
	Next() bool
	Err() error
}

// ScanAll scans every row left in rows; the caller closes rows and classes
// the error in its driver's terms.
func ScanAll[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		item, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, item)
	}
	return out, rows.Err()
}

// CutPage makes one page of at most n items out of a query's rows fetched
// with LIMIT n+1: the extra row only says that there is more, and then the
// page's last item, by its key (created_at, id), is where the next starts.
func CutPage[T any](items []T, n int, key func(T) (time.Time, string)) store.Page[T] {
	if len(items) <= n {
		return store.Page[T]{Items: items}
	}
	at, id := key(items[n-1])
	return store.Page[T]{Items: items[:n], NextPageToken: EncodeCursor(Nanos(at), id)}
}
