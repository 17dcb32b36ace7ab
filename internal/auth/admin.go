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
)

// AdminKeyFile is the name of the bootstrap admin key file in the data dir.
const AdminKeyFile = "admin.key"

// EnsureAdmin makes sure an admin key exists for a single-node server. On
// first start it creates the admin tenant and an admin key and writes the key
// to <dataDir>/admin.key (mode 0600). When the file already holds a working
// admin key it changes nothing. When the file is missing, or its key no
// longer works (the database was replaced), it makes a new key and rewrites
// the file. It returns the file's path and whether it wrote a new key.
func (a *Authenticator) EnsureAdmin(ctx context.Context, dataDir string) (path string, created bool, err error) {
	path = filepath.Join(dataDir, AdminKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		p, err := a.Authenticate(ctx, strings.TrimSpace(string(b)))
		if err == nil && p.Admin {
			return path, false, nil
		}
		if err != nil && errdefs.ClassOf(err) != errdefs.ErrUnauthenticated {
			return "", false, err
		}
		a.log.WarnContext(ctx, "admin key file holds no working admin key; writing a new one", "path", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("read admin key file: %w: %v", errdefs.ErrInternal, err)
	}

	tenant, err := a.adminTenant(ctx)
	if err != nil {
		return "", false, err
	}
	secret, key, err := a.CreateKey(ctx, tenant.ID, true)
	if err != nil {
		return "", false, err
	}
	if err := writeSecret(dataDir, path, secret+"\n"); err != nil {
		// The key is useless when nobody can read it: take it back.
		if rerr := a.store.RevokeAPIKey(context.WithoutCancel(ctx), key.ID); rerr != nil {
			a.log.ErrorContext(ctx, "revoke unwritten admin key", "key", key.ID, "err", rerr)
		}
		return "", false, err
	}
	a.log.InfoContext(ctx, "admin API key written", "path", path, "key", key.ID)
	return path, true, nil
}

// writeSecret writes data to path with mode 0600, atomically: a reader sees
// the old file or the whole new one, never a partial key.
func writeSecret(dir, path, data string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w: %v", errdefs.ErrInternal, err)
	}
	f, err := os.CreateTemp(dir, ".admin.key-*")
	if err != nil {
		return fmt.Errorf("write admin key: %w: %v", errdefs.ErrInternal, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write admin key: %w: %v", errdefs.ErrInternal, err)
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return fmt.Errorf("write admin key: %w: %v", errdefs.ErrInternal, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write admin key: %w: %v", errdefs.ErrInternal, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write admin key: %w: %v", errdefs.ErrInternal, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write admin key: %w: %v", errdefs.ErrInternal, err)
	}
	return nil
}
