package store

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
)

// ID prefixes (docs/api.md, "JSON, ids, times").
const (
	PrefixTenant     = "ten"
	PrefixAPIKey     = "key"
	PrefixSandbox    = "sbx"
	PrefixOperation  = "op"
	PrefixCommand    = "cmd"
	PrefixCheckpoint = "ckpt"
	PrefixTemplate   = "tpl"
)

// crockford is Crockford's base32 in lower case: no i, l, o, u, and it sorts
// in byte order like the bytes it encodes.
var crockford = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID returns prefix + "_" + 26 characters: 48 bits of milliseconds then
// 80 random bits (a ULID in lower-case Crockford base32). IDs made later
// sort later, which keeps listings stable; the random part makes them
// unguessable.
func NewID(prefix string) string {
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(b[:6], ts[2:])
	if _, err := rand.Read(b[6:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on Linux ≥ 3.17
	}
	return prefix + "_" + crockford.EncodeToString(b[:])
}

// HasPrefix reports whether id carries the given type prefix.
func HasPrefix(id, prefix string) bool {
	return strings.HasPrefix(id, prefix+"_") && len(id) > len(prefix)+1
}
