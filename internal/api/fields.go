package api

import (
	"strconv"
	"strings"
)

// noNUL notes in fields that the value of field holds a NUL byte and
// reports whether it holds none. Every string that ends up as an execve
// argument, an environment entry or a path is checked: the kernel cannot
// take a NUL there, and its refusal deep in the guest or the build host
// would reach the caller as a server error instead of a 400 naming the
// field.
func noNUL(fields map[string]string, field, v string) bool {
	if strings.IndexByte(v, 0) < 0 {
		return true
	}
	fields[field] = "must not contain a NUL byte"
	return false
}

// noNULs is noNUL for each element of a list, named field[i].
func noNULs(fields map[string]string, field string, vs []string) {
	for i, v := range vs {
		noNUL(fields, field+"["+strconv.Itoa(i)+"]", v)
	}
}
