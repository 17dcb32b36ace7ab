// Package auth owns tenants and their API keys: it makes tenants and keys
// (the admin API's), hashes keys, turns a bearer
// token into a Principal, and bootstraps the single-node admin key into
// <data-dir>/admin.key. It never logs or returns a secret except the one time
// a key is made.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// KeyPrefix starts every API key of the default format.
const KeyPrefix = "space_"

// E2BKeyPrefix starts keys of the "e2b" format: "e2b_" and lower-case hex,
// the form E2B's Python SDK checks keys against. They are SPACE keys all
// the same, valid on /v1 and on the E2B-compatible API alike.
const E2BKeyPrefix = "e2b_"

// Key formats of CreateKeyFormat.
const (
	FormatSpace = "space"
	FormatE2B   = "e2b"
)

// displayLen is how much of a key is kept (Prefix) for people to tell keys apart.
const displayLen = len(KeyPrefix) + 6

// AdminTenant is the name of the tenant that owns the bootstrap admin key.
const AdminTenant = "admin"

var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Principal is who a request acts as.
type Principal struct {
	TenantID string
	KeyID    string
	Admin    bool
}

// GenerateKey returns a fresh API key: "space_" + 32 random bytes in
// lower-case base32 (52 characters).
func GenerateKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate key: %w", errdefs.ErrInternal)
	}
	return KeyPrefix + keyEncoding.EncodeToString(b[:]), nil
}

// GenerateE2BKey returns a fresh key in the "e2b" format: "e2b_" + 32
// random bytes in lower-case hex (68 characters).
func GenerateE2BKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate key: %w", errdefs.ErrInternal)
	}
	return E2BKeyPrefix + hex.EncodeToString(b[:]), nil
}

// HashKey returns the stored form of a key: hex SHA-256. Keys carry 256 bits
// of entropy, so a fast hash is right; a slow KDF protects only guessable
// secrets such as passwords.
func HashKey(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// DisplayPrefix is the part of a key kept in clear for display.
func DisplayPrefix(secret string) string {
	if len(secret) <= displayLen {
		return secret
	}
	return secret[:displayLen]
}

// TokenFromHeader extracts the token of an "Authorization: Bearer <token>"
// header value; ok is false when it is not a bearer credential.
func TokenFromHeader(h string) (token string, ok bool) {
	scheme, tok, found := strings.Cut(strings.TrimSpace(h), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// Authenticator checks API keys against a store.
type Authenticator struct {
	store store.Accounts
	log   *slog.Logger
}

// New returns an Authenticator over s.
func New(s store.Accounts, log *slog.Logger) *Authenticator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Authenticator{store: s, log: log}
}

// errUnauthenticated is the one answer to every bad credential, so a caller
// cannot tell an unknown key from a revoked one or a malformed one.
func errUnauthenticated() error {
	return errdefs.New(errdefs.ErrUnauthenticated, "missing or invalid API key")
}

// Authenticate returns the principal of a bearer token (the key itself, not
// the header). Any failure is errdefs.ErrUnauthenticated, except a store
// failure, which is ErrUnavailable/ErrInternal.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (Principal, error) {
	if !(strings.HasPrefix(token, KeyPrefix) || strings.HasPrefix(token, E2BKeyPrefix)) || len(token) > 256 {
		return Principal{}, errUnauthenticated()
	}
	hash := HashKey(token)
	k, err := a.store.GetAPIKeyByHash(ctx, hash)
	if err != nil {
		if errdefs.ClassOf(err) == errdefs.ErrNotFound {
			return Principal{}, errUnauthenticated()
		}
		a.log.ErrorContext(ctx, "authenticate: key lookup", "err", err)
		return Principal{}, fmt.Errorf("key lookup: %w", errdefs.ErrUnavailable)
	}
	// The lookup went by hash; compare again in constant time so that the
	// decision never depends on a short-circuiting comparison.
	if subtle.ConstantTimeCompare([]byte(k.Hash), []byte(hash)) != 1 || k.RevokedAt != nil {
		return Principal{}, errUnauthenticated()
	}
	return Principal{TenantID: k.TenantID, KeyID: k.ID, Admin: k.Admin}, nil
}

// CreateKey makes a key for a tenant. The secret is returned only here.
func (a *Authenticator) CreateKey(ctx context.Context, tenantID string, admin bool) (secret string, key *store.APIKey, err error) {
	return a.CreateKeyFormat(ctx, tenantID, admin, FormatSpace)
}

// CreateKeyFormat is CreateKey in a format: FormatSpace (also "") or
// FormatE2B; another is ErrInvalidArgument.
func (a *Authenticator) CreateKeyFormat(ctx context.Context, tenantID string, admin bool, format string) (secret string, key *store.APIKey, err error) {
	switch format {
	case "", FormatSpace:
		secret, err = GenerateKey()
	case FormatE2B:
		secret, err = GenerateE2BKey()
	default:
		return "", nil, errdefs.New(errdefs.ErrInvalidArgument, "unknown key format %q (space or e2b)", format).
			WithDetails(map[string]any{"format": "must be space or e2b"})
	}
	if err != nil {
		return "", nil, err
	}
	key = &store.APIKey{
		ID:       store.NewID(store.PrefixAPIKey),
		TenantID: tenantID,
		Prefix:   DisplayPrefix(secret),
		Hash:     HashKey(secret),
		Admin:    admin,
	}
	if err := a.store.CreateAPIKey(ctx, key); err != nil {
		return "", nil, fmt.Errorf("create key: %w", err)
	}
	a.log.InfoContext(ctx, "api key created", "key", key.ID, "tenant", tenantID, "admin", admin)
	return secret, key, nil
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal WithPrincipal stored.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// CreateTenant stores a new tenant (conflict when its name is taken).
func (a *Authenticator) CreateTenant(ctx context.Context, t *store.Tenant) error {
	return a.store.CreateTenant(ctx, t)
}

// TenantByName is the tenant named name.
func (a *Authenticator) TenantByName(ctx context.Context, name string) (*store.Tenant, error) {
	return a.store.GetTenantByName(ctx, name)
}

// RevokeKey revokes API key id: it authenticates nothing from then on.
func (a *Authenticator) RevokeKey(ctx context.Context, id string) error {
	return a.store.RevokeAPIKey(ctx, id)
}
