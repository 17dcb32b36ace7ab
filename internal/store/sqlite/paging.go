package sqlite

import (
	"context"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/store"
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
func listPage[T any](ctx context.Context, c *conn, q pageQuery, scan func(interface{ Scan(...any) error }) (T, error),
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
		q.filter("(created_at "+cmp+" ? OR (created_at = ? AND id "+cmp+" ?))", cur.at, cur.at, cur.id)
	}
	sql := "SELECT " + q.cols + " FROM " + q.table
	if len(q.where) > 0 {
		sql += " WHERE " + strings.Join(q.where, " AND ")
	}
	n := pageSize(q.PageSize)
	sql += " ORDER BY " + order + " LIMIT ?"
	rows, err := c.rd.QueryContext(ctx, sql, append(q.args, n+1)...)
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
