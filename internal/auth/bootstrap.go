package auth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// minBootstrapKeyLen bounds how short a bootstrap admin key may be: the
// prefix and at least 32 characters of secret.
const minBootstrapKeyLen = len(KeyPrefix) + 32

// RegisterAdminKey makes the key in path (a control plane's --admin-key-file,
// in a cluster a Kubernetes Secret every replica mounts) an admin key of the
// admin tenant: the store keeps its hash only. A missing file is created
// first with a new key (mode 0600; of replicas racing, one key wins and all
// read it), for a cluster on one machine whose replicas share a directory. It is idempotent and safe
// to run from several replicas at once: a key already registered changes
// nothing. A key that was revoked, or that belongs to a tenant's non-admin
// key, is refused (re-registering it would undo an admin's decision): put
// a new key in the file. The key never appears in errors or logs.
func (a *Authenticator) RegisterAdminKey(ctx context.Context, path string) error {
	secret, err := readBootstrapKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err = createBootstrapKey(path); err == nil {
			a.log.InfoContext(ctx, "bootstrap admin key written", "path", path)
			secret, err = readBootstrapKey(path)
		}
	}
	if err != nil {
		return err
	}
	hash := HashKey(secret)
	for attempt := 0; attempt < 2; attempt++ {
		k, err := a.store.GetAPIKeyByHash(ctx, hash)
		switch {
		case err == nil && k.RevokedAt != nil:
			return errdefs.New(errdefs.ErrFailedPrecondition, "the admin key in %s was revoked; put a new key in it", path)
		case err == nil && !k.Admin:
			return errdefs.New(errdefs.ErrFailedPrecondition, "the key in %s is a tenant's key, not an admin key; put a new key in it", path)
		case err == nil:
			return nil
		case errdefs.ClassOf(err) != errdefs.ErrNotFound:
			return fmt.Errorf("admin key: %w", err)
		}
		tenant, err := a.adminTenant(ctx)
		if err != nil {
			return err
		}
		key := &store.APIKey{ID: store.NewID(store.PrefixAPIKey), TenantID: tenant.ID,
			Prefix: DisplayPrefix(secret), Hash: hash, Admin: true}
		err = a.store.CreateAPIKey(ctx, key)
		if err == nil {
			a.log.InfoContext(ctx, "bootstrap admin key registered", "path", path, "key", key.ID)
			return nil
		}
		if errdefs.ClassOf(err) != errdefs.ErrConflict {
			return fmt.Errorf("admin key: %w", err)
		}
		// Another replica registered it meanwhile: read it back.
	}
	return fmt.Errorf("admin key: registration kept conflicting: %w", errdefs.ErrUnavailable)
}

// adminTenant returns the admin tenant, creating it when missing.
func (a *Authenticator) adminTenant(ctx context.Context) (*store.Tenant, error) {
	tenant, err := a.store.GetTenantByName(ctx, AdminTenant)
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		tenant = &store.Tenant{Name: AdminTenant}
		err = a.store.CreateTenant(ctx, tenant)
		if errdefs.ClassOf(err) == errdefs.ErrConflict { // made concurrently
			tenant, err = a.store.GetTenantByName(ctx, AdminTenant)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("admin tenant: %w", err)
	}
	return tenant, nil
}

// readBootstrapKey reads a bootstrap admin key: one line, a key of the
// default format, not readable by others.
func readBootstrapKey(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("admin key file: %w", errors.Join(errdefs.ErrFailedPrecondition, err))
	}
	if fi.Mode().Perm()&0o007 != 0 {
		return "", errdefs.New(errdefs.ErrFailedPrecondition, "admin key file %s is readable by others (mode %v)", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin key file: %w", errors.Join(errdefs.ErrFailedPrecondition, err))
	}
	secret := strings.TrimSpace(string(b))
	if !strings.HasPrefix(secret, KeyPrefix) || len(secret) < minBootstrapKeyLen || len(secret) > 256 || strings.ContainsAny(secret, " \t\r\n") {
		return "", errdefs.New(errdefs.ErrFailedPrecondition,
			"admin key file %s must hold one key: %q and at least 32 more characters, no spaces", path, KeyPrefix)
	}
	return secret, nil
}

// createBootstrapKey writes a new key to path unless a file is there: the
// key is written whole to a temporary file first and then linked into
// place, which fails when path exists, so a reader never sees half a key
// and a racing writer's key is never replaced.
func createBootstrapKey(path string) error {
	secret, err := GenerateKey()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("admin key file: %w", errors.Join(errdefs.ErrInternal, err))
	}
	f, err := os.CreateTemp(dir, ".admin.key-*")
	if err != nil {
		return fmt.Errorf("admin key file: %w", errors.Join(errdefs.ErrInternal, err))
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, werr := f.WriteString(secret + "\n")
	if err := errors.Join(werr, f.Chmod(0o600), f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("admin key file: %w", errors.Join(errdefs.ErrInternal, err))
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("admin key file: %w", errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}
