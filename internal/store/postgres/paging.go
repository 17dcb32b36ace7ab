package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/store"
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
func listPage[T any](ctx context.Context, c *conn, q pageQuery, scan func(pgx.Row) (T, error),
	key func(T) (time.Time, string)) (store.Page[T], error) {
	var page store.Page[T]
	cur, err := decodeCursor(q.PageToken)
	if err != nil {
		return page, err
	}
	cmp, order := ">", "created_at, id"
	if q.newest {
		cmp, order = "<", "created_at DESC, id DESC"
	}
	if cur != nil {
		// A row-value comparison: one index range scan.
		q.filter("(created_at, id) " + cmp + " (" + q.arg(cur.at) + ", " + q.arg(cur.id) + ")")
	}
	sql := "SELECT " + q.cols + " FROM " + q.table
	if len(q.where) > 0 {
		sql += " WHERE " + strings.Join(q.where, " AND ")
	}
	n := pageSize(q.PageSize)
	sql += " ORDER BY " + order + " LIMIT " + q.arg(n+1)
	rows, err := c.q.Query(ctx, sql, q.args...)
	if err != nil {
		return page, dbErr(q.what, err)
	}
	defer rows.Close()
	for rows.Next() {
		item, err := scan(rows)
		if err != nil {
			return page, dbErr(q.what, err)
		}
		page.Items = append(page.Items, item)
	}
	if err := rows.Err(); err != nil {
		return page, dbErr(q.what, err)
	}
	if len(page.Items) > n {
		page.Items = page.Items[:n]
		at, id := key(page.Items[n-1])
		page.NextPageToken = encodeCursor(nanos(at), id)
	}
	return page, nil
}

// collect runs a query and scans every row.
func collect[T any](ctx context.Context, c *conn, what string, scan func(pgx.Row) (T, error), sql string, a ...any) ([]T, error) {
	rows, err := c.q.Query(ctx, sql, a...)
	if err != nil {
		return nil, dbErr(what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		item, err := scan(rows)
		if err != nil {
			return nil, dbErr(what, err)
		}
		out = append(out, item)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(what, err)
	}
	return out, nil
}
