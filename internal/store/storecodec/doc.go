// Package storecodec is what the SQL stores (store/sqlite, store/postgres)
// share that no SQL dialect shapes: how store values become column values and
// back (times as UTC nanoseconds, JSON text, string maps, NULL as a nil
// pointer), page sizes, and the page token of a (created_at, id) ordering.
// It knows no database driver and writes no SQL; a dialect's queries, locks
// and placeholders stay in the dialect's package.
package storecodec
