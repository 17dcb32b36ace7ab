package api

import "github.com/space-sandbox/space/internal/sandbox"

// noNUL and noNULs are the domain's checks (sandbox.NoNUL) for the fields
// the API validates itself (template sources and defaults).
func noNUL(fields map[string]string, field, v string) bool { return sandbox.NoNUL(fields, field, v) }

func noNULs(fields map[string]string, field string, vs []string) { sandbox.NoNULs(fields, field, vs) }
