package sqlite

import (
	"context"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// pageQuery is one keyset-paginated listing over a table whose rows are
// ordered by (created_at, id): the one way every List* method pages.
type pageQuery struct {
	what   string // for errors, e.g. "list sandboxes"
	cols   string
	table  string
	where  []string // ANDed conditions
	args   []any    // their arguments, in order
	newest bool     // newest first (otherwise oldest first)
	store.PageRequest
}

// filter adds a condition with its arguments.
func (q *pageQuery) filter(cond string, args ...any) {
	q.where = append(q.where, cond)
	q.args = append(q.args, args...)
}

// listPage runs q and returns one page; createdAt and id give a row's key,
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
		q.filter("(created_at "+cmp+" ? OR (created_at = ? AND id "+cmp+" ?))", cur.At, cur.At, cur.ID)
	}
	sql := "SELECT " + q.cols + " FROM " + q.table
	if len(q.where) > 0 {
		sql += " WHERE " + strings.Join(q.where, " AND ")
	}
	n := storecodec.PageSize(q.PageSize)
	sql += " ORDER BY " + order + " LIMIT ?"
	rows, err := c.rd.QueryContext(ctx, sql, append(q.args, n+1)...)
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

// collect runs a query on q (the reader pool, or the writer inside a
// transaction) and scans every row.
func collect[T any](ctx context.Context, q dbtx, what string, scan func(storecodec.Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
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
