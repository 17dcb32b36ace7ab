package sqlite

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
)

// stmtCacheSize bounds the prepared statements one connection keeps: the
// store's fixed queries number fewer, and the queries it builds (list
// filters, IN lists) vary within a few dozen shapes.
const stmtCacheSize = 128

// cachingConnector opens the driver's connections wrapped in a
// statement cache. modernc.org/sqlite prepares a statement for every
// query and exec that database/sql hands it with its text (and finalizes
// it after), so without the cache each call re-parses and re-plans its SQL
// (sqlite3_prepare_v2), a third of the CPU of a create under load, and on
// the one writer connection that time holds every other writer back. A
// prepared statement, by contrast, is reset and re-bound between uses.
type cachingConnector struct {
	driver.Connector
}

func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	inner, ok := dc.(sqliteConn)
	if !ok { // the driver's connections implement all of them (its connector.go)
		dc.Close()
		return nil, fmt.Errorf("sqlite driver connection %T lacks the context interfaces", dc)
	}
	return &cachingConn{sqliteConn: inner, byQuery: map[string]*list.Element{}, lru: list.New()}, nil
}

// sqliteConn is what the driver's connections implement and the wrapper
// forwards (the driver's connector.go names them).
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn is one connection and its prepared statements, the most
// recently used first. database/sql uses a connection from one goroutine
// at a time, so it needs no lock; but a statement's rows may still be open
// when the same query runs again on the connection (inside a transaction),
// so a statement in use is never handed out twice: that call prepares a
// statement of its own.
type cachingConn struct {
	sqliteConn
	byQuery map[string]*list.Element // of *cachedStmt
	lru     *list.List
}

type cachedStmt struct {
	query string
	stmt  driver.Stmt
	busy  bool // its rows are open
}

var (
	_ sqliteConn                        = (*cachingConn)(nil)
	_ interface{ Unwrap() driver.Conn } = (*cachingConn)(nil)
)

// Unwrap is the driver's connection (modernc.org/sqlite's wrapper convention).
func (c *cachingConn) Unwrap() driver.Conn { return c.sqliteConn }

// statement is query's prepared statement, and release, to call once it
// is no longer used (after its rows close).
func (c *cachingConn) statement(ctx context.Context, query string) (st driver.Stmt, release func(), err error) {
	if el, ok := c.byQuery[query]; ok {
		cs := el.Value.(*cachedStmt)
		if !cs.busy {
			c.lru.MoveToFront(el)
			cs.busy = true
			return cs.stmt, func() { cs.busy = false }, nil
		}
		st, err := c.sqliteConn.PrepareContext(ctx, query) // in use: one of its own
		if err != nil {
			return nil, nil, err
		}
		return st, func() { st.Close() }, nil
	}
	st, err = c.sqliteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, nil, err
	}
	cs := &cachedStmt{query: query, stmt: st, busy: true}
	c.byQuery[query] = c.lru.PushFront(cs)
	c.evict()
	return st, func() { cs.busy = false }, nil
}

// evict closes the least recently used statements not in use past the bound.
func (c *cachingConn) evict() {
	for el := c.lru.Back(); el != nil && c.lru.Len() > stmtCacheSize; {
		prev := el.Prev()
		if cs := el.Value.(*cachedStmt); !cs.busy {
			cs.stmt.Close()
			delete(c.byQuery, cs.query)
			c.lru.Remove(el)
		}
		el = prev
	}
}

// checkArgs refuses a call whose argument count the statement does not
// take, as database/sql does for its own prepared statements (binding
// would otherwise leave the missing ones NULL).
func checkArgs(st driver.Stmt, args []driver.NamedValue) error {
	if n := st.NumInput(); n >= 0 && n != len(args) {
		return fmt.Errorf("sql: expected %d arguments, got %d", n, len(args))
	}
	return nil
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	st, release, err := c.statement(ctx, query)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := checkArgs(st, args); err != nil {
		return nil, err
	}
	return st.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	st, release, err := c.statement(ctx, query)
	if err != nil {
		return nil, err
	}
	if err := checkArgs(st, args); err != nil {
		release()
		return nil, err
	}
	rows, err := st.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		release()
		return nil, err
	}
	return &releasingRows{Rows: rows, release: release}, nil
}

// releasingRows gives its statement back when closed.
type releasingRows struct {
	driver.Rows
	release func()
}

func (r *releasingRows) Close() error {
	err := r.Rows.Close()
	if r.release != nil {
		r.release()
		r.release = nil
	}
	return err
}

// Close closes the cached statements, then the connection.
func (c *cachingConn) Close() error {
	var errs []error
	for el := c.lru.Front(); el != nil; el = el.Next() {
		errs = append(errs, el.Value.(*cachedStmt).stmt.Close())
	}
	c.lru.Init()
	clear(c.byQuery)
	return errors.Join(append(errs, c.sqliteConn.Close())...)
}
