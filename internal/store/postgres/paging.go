package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// args collects a statement's arguments and names their placeholders.
type args []any

// add appends v and returns its placeholder ($n).
func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// pageQuery is one keyset-paginated listing over a table whose rows are
// ordered by (created_at, id): the one way every List* method pages.
type pageQuery struct {
	what   string // for errors, e.g. "list sandboxes"
	cols   string
	table  string
	where  []string // ANDed conditions
	args   args
	newest bool // newest first (otherwise oldest first)
	store.PageRequest
}

// filter adds a condition; arg returns each value's placeholder.
func (q *pageQuery) filter(cond string) { q.where = append(q.where, cond) }

// arg adds a value and returns its placeholder.
func (q *pageQuery) arg(v any) string { return q.args.add(v) }

// listPage runs q and returns one page; key gives a row's (created_at, id),
// from which the next page token is made.
func listPage[T any](ctx context.Context, c *conn, q pageQuery, scan func(storecodec.Row) (T, error),
	key func(T) (time.Time, string)) (store.Page[T], error) {
	var page store.Page[T]
	cur, err := storecodec.DecodeCursor(q.PageToken)
	if err != nil {
		return page, err
	}
	cmp, order := ">", "created_at, id"
	if q.newest {
		cmp, order = "<", "created_at DESC, id DESC"
	}
	if cur != nil {
		// A row-value comparison: one index range scan.
		q.filter("(created_at, id) " + cmp + " (" + q.arg(cur.At) + ", " + q.arg(cur.ID) + ")")
	}
	sql := "SELECT " + q.cols + " FROM " + q.table
	if len(q.where) > 0 {
		sql += " WHERE " + strings.Join(q.where, " AND ")
	}
	n := storecodec.PageSize(q.PageSize)
	sql += " ORDER BY " + order + " LIMIT " + q.arg(n+1)
	rows, err := c.q.Query(ctx, sql, q.args...)
	if err != nil {
		return page, dbErr(q.what, err)
	}
	defer rows.Close()
	items, err := storecodec.ScanAll(rows, scan)
	if err != nil {
		return page, dbErr(q.what, err)
	}
	return storecodec.CutPage(items, n, key), nil
}

// collect runs a query and scans every row.
func collect[T any](ctx context.Context, c *conn, what string, scan func(storecodec.Row) (T, error), sql string, a ...any) ([]T, error) {
	rows, err := c.q.Query(ctx, sql, a...)
	if err != nil {
		return nil, dbErr(what, err)
	}
	defer rows.Close()
	out, err := storecodec.ScanAll(rows, scan)
	if err != nil {
		return nil, dbErr(what, err)
	}
	return out, nil
}
