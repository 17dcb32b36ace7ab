// Package storecodec is what the SQL stores (store/sqlite, store/postgres)
// share that no SQL dialect shapes: how store values become column values and
// back (times as UTC nanoseconds, JSON text, string maps, NULL as a nil
// pointer); each table's row (its columns in one order, which both schemas
// name alike, scanned into a store value and written from one); the
// dialect-free half of a write (a create's checks and defaults, a
// compare-and-set change, the quota check, the errors they return); page
// sizes and the page token of a (created_at, id) ordering. It knows no
// database driver: queries, placeholders, casts, locks and transactions stay
// in the dialect's package.
package storecodec
