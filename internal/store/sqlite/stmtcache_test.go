package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/store"
)

// cached is how many statements the one writer connection keeps prepared.
func cached(t *testing.T, db *sql.DB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := -1
	if err := c.Raw(func(dc any) error {
		if cc, ok := dc.(*cachingConn); ok {
			n = cc.lru.Len()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The store's connections keep the statements they ran prepared: running
// the same calls again prepares nothing more.
func TestStatementsStayPrepared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openTest(t)
	create := func(name string) {
		if err := s.CreateTenant(ctx, &store.Tenant{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	create("a")
	before := cached(t, s.writer)
	if before < 1 {
		t.Fatalf("the writer connection keeps %d statements after a create, want some (-1: not a caching connection)", before)
	}
	create("b")
	if after := cached(t, s.writer); after != before {
		t.Errorf("the writer keeps %d statements after a second create, %d after the first: the same SQL was prepared again", after, before)
	}
}

// A query run again while its first run's rows are still open (inside one
// transaction) gets a statement of its own; both read their own rows.
func TestStatementInUseIsNotShared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openTest(t)
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const q = `SELECT value FROM (SELECT 1 AS value UNION ALL SELECT 2 UNION ALL SELECT 3) WHERE value >= ? ORDER BY value`
	outer, err := tx.QueryContext(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for outer.Next() {
		var v int
		if err := outer.Scan(&v); err != nil {
			t.Fatal(err)
		}
		var inner []int
		rows, err := tx.QueryContext(ctx, q, v)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var w int
			if err := rows.Scan(&w); err != nil {
				t.Fatal(err)
			}
			inner = append(inner, w)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(v, inner))
	}
	if err := outer.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "[1 [1 2 3] 2 [2 3] 3 [3]]"; fmt.Sprint(got) != want {
		t.Errorf("nested runs of one query read %v, want %s", got, want)
	}
}

// The cache is bounded: many distinct queries leave at most stmtCacheSize
// statements prepared, and a wrong argument count is refused.
func TestStatementCacheBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openTest(t)
	for i := range stmtCacheSize + 50 {
		var v int
		if err := s.writer.QueryRowContext(ctx, fmt.Sprintf("SELECT %d + ?", i), 1).Scan(&v); err != nil || v != i+1 {
			t.Fatalf("query %d: %d, %v", i, v, err)
		}
	}
	if n := cached(t, s.writer); n != stmtCacheSize {
		t.Errorf("%d statements kept, want the bound %d", n, stmtCacheSize)
	}
	var v int
	if err := s.writer.QueryRowContext(ctx, "SELECT ? + ?", 1).Scan(&v); err == nil {
		t.Errorf("a query missing an argument ran: %d", v)
	}
}
