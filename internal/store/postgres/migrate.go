package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/space-sandbox/space/internal/errdefs"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock key replicas migrate under
// (the bytes of "spacemig").
const migrationLock int64 = 0x73706163656d6967

// migration is one embedded schema change.
type migration struct {
	version int
	name    string
	body    string
}

// loadMigrations returns the embedded migrations in version order.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", errdefs.ErrInternal)
	}
	var out []migration
	seen := map[int]string{}
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if err != nil || version <= 0 {
			return nil, fmt.Errorf("migration %s: bad version: %w", base, errdefs.ErrInternal)
		}
		if prev, dup := seen[version]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d: %w", prev, base, version, errdefs.ErrInternal)
		}
		seen[version] = base
		body, err := migrations.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, errdefs.ErrInternal)
		}
		out = append(out, migration{version: version, name: base, body: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// migrate applies the embedded migrations not yet recorded in
// schema_migrations, in order, all in one transaction that first takes an
// advisory lock: a replica starting beside another waits for its migration
// and then finds nothing left to do. Any failure leaves the schema as it was.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := loadMigrations()
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return dbErr("begin migration", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		return dbErr("take the migration lock", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		return dbErr("create schema_migrations", err)
	}
	applied, err := appliedVersions(ctx, tx)
	if err != nil {
		return err
	}
	for _, m := range all {
		if applied[m.version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.body); err != nil {
			return dbErr("apply migration "+m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
			m.version, m.name, time.Now().UnixNano()); err != nil {
			return dbErr("record migration "+m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return dbErr("commit migrations", err)
	}
	return nil
}

func appliedVersions(ctx context.Context, tx pgx.Tx) (map[int]bool, error) {
	rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, dbErr("read schema_migrations", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, dbErr("read schema_migrations", err)
	}
	out := map[int]bool{}
	for _, v := range versions {
		out[int(v)] = true
	}
	return out, nil
}
