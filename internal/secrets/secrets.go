// Package secrets keeps tenants' named secrets: values sealed with
// AES-256-GCM under a deployment key (kept in <data-dir>/secrets.key, mode
// 0600) before they reach the store, bound to their tenant and name so a
// sealed value cannot be moved to another, and opened only when the egress
// proxy resolves a ${secret:NAME} reference at request time.
//
// No method returns a value to a caller outside the worker's egress path:
// listings carry names and timestamps only, and no error or log line holds a
// value.
package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// KeyFile is the key's file name in the data dir.
const KeyFile = "secrets.key"

// KeySize is the length of the AES-256 key.
const KeySize = 32

// MaxValueBytes bounds one secret's value.
const MaxValueBytes = 64 << 10

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// ValidName reports whether name can name a secret (and be referenced as
// ${secret:NAME} in a network policy).
func ValidName(name string) bool { return nameRE.MatchString(name) }

// LoadKey reads the key at path, creating it (32 random bytes, mode 0600)
// when it does not exist. A key that others can read, or its group write,
// or of the wrong size, is refused; group read is allowed, as a Kubernetes
// Secret volume with an fsGroup mounts it (0440).
func LoadKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, KeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("secrets key: %w", errors.Join(errdefs.ErrInternal, err))
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("secrets key dir: %w", errors.Join(errdefs.ErrInternal, err))
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return LoadKey(path) // another process made it first
		}
		if err != nil {
			return nil, fmt.Errorf("create secrets key: %w", errors.Join(errdefs.ErrInternal, err))
		}
		_, werr := f.Write(key)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			_ = os.Remove(path)
			return nil, fmt.Errorf("write secrets key: %w", errors.Join(errdefs.ErrInternal, err))
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read secrets key: %w", errors.Join(errdefs.ErrInternal, err))
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("stat secrets key: %w", errors.Join(errdefs.ErrInternal, err))
	}
	if fi.Mode().Perm()&0o037 != 0 {
		return nil, fmt.Errorf("secrets key %s is open to others or writable by its group (mode %v; want 0600, 0400 or 0440): %w", path, fi.Mode().Perm(), errdefs.ErrFailedPrecondition)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets key %s: %d bytes, want %d: %w", path, len(key), KeySize, errdefs.ErrFailedPrecondition)
	}
	return key, nil
}

// Info describes a secret without its value.
type Info struct {
	Name      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Service seals, stores and resolves secrets.
type Service struct {
	st   store.Secrets
	aead cipher.AEAD
	log  *slog.Logger
}

// New returns a Service sealing under key (KeySize bytes).
func New(st store.Secrets, key []byte, log *slog.Logger) (*Service, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets: key must be %d bytes: %w", KeySize, errdefs.ErrInvalidArgument)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", errors.Join(errdefs.ErrInternal, err))
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", errors.Join(errdefs.ErrInternal, err))
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{st: st, aead: aead, log: log}, nil
}

// aad binds a sealed value to its tenant and name.
func aad(tenantID, name string) []byte { return []byte("space-secret\x00" + tenantID + "\x00" + name) }

func (s *Service) seal(tenantID, name, value string) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(value)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("secrets: nonce: %w", errors.Join(errdefs.ErrInternal, err))
	}
	return s.aead.Seal(nonce, nonce, []byte(value), aad(tenantID, name)), nil
}

func (s *Service) open(tenantID, name string, sealed []byte) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return "", fmt.Errorf("secret %q: sealed value too short: %w", name, errdefs.ErrDataLoss)
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], aad(tenantID, name))
	if err != nil {
		// Wrong key, or a value moved or tampered with. Never say more.
		return "", fmt.Errorf("secret %q cannot be opened with this deployment's key: %w", name, errdefs.ErrDataLoss)
	}
	return string(plain), nil
}

// validate checks a name and value; the value is never quoted back.
func validate(name, value string) error {
	f := map[string]any{}
	if !ValidName(name) {
		f["name"] = "1-128 characters of letters, digits and _ . - (not starting with . or -)"
	}
	switch {
	case value == "":
		f["value"] = "required"
	case len(value) > MaxValueBytes:
		f["value"] = fmt.Sprintf("at most %d bytes", MaxValueBytes)
	case !utf8.ValidString(value):
		f["value"] = "must be UTF-8 text"
	}
	if len(f) > 0 {
		return errdefs.New(errdefs.ErrInvalidArgument, "invalid secret").WithDetails(f)
	}
	return nil
}

// Put seals and stores value as the tenant's secret name, replacing any
// earlier value; created says whether it is new.
func (s *Service) Put(ctx context.Context, tenantID, name, value string) (Info, bool, error) {
	if err := validate(name, value); err != nil {
		return Info{}, false, err
	}
	sealed, err := s.seal(tenantID, name, value)
	if err != nil {
		return Info{}, false, err
	}
	rec := &store.Secret{TenantID: tenantID, Name: name, Sealed: sealed}
	created, err := s.st.PutSecret(ctx, rec)
	if err != nil {
		return Info{}, false, err
	}
	s.log.InfoContext(ctx, "secret stored", "tenant", tenantID, "secret", name, "created", created)
	return Info{Name: name, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}, created, nil
}

// List returns the tenant's secrets by name, without values.
func (s *Service) List(ctx context.Context, tenantID string) ([]Info, error) {
	recs, err := s.st.ListSecrets(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(recs))
	for _, r := range recs {
		out = append(out, Info{Name: r.Name, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt})
	}
	return out, nil
}

// Delete removes the tenant's secret name (ErrNotFound when absent).
// Sandboxes whose policies reference it stop injecting it at once.
func (s *Service) Delete(ctx context.Context, tenantID, name string) error {
	if !ValidName(name) {
		return errdefs.New(errdefs.ErrNotFound, "secret %q not found", name)
	}
	if err := s.st.DeleteSecret(ctx, tenantID, name); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "secret deleted", "tenant", tenantID, "secret", name)
	return nil
}

// Resolve returns the current value of the tenant's secret name. Only the
// egress path calls it, for each request it injects into.
func (s *Service) Resolve(ctx context.Context, tenantID, name string) (string, error) {
	if !ValidName(name) {
		return "", fmt.Errorf("secret %q: %w", name, errdefs.ErrNotFound)
	}
	rec, err := s.st.GetSecret(ctx, tenantID, name)
	if err != nil {
		return "", err
	}
	return s.open(tenantID, name, rec.Sealed)
}
