package auth

import (
	"context"
	"fmt"

	"github.com/space-sandbox/space/internal/errdefs"
)

// AdminKeyFile is the name of the bootstrap admin key file in the data dir.
const AdminKeyFile = "admin.key"

// EnsureAdmin makes sure an admin key exists for a single-node server. On
// first start it creates the admin tenant and an admin key and writes the key
// to <dataDir>/admin.key (mode 0600). When the file already holds a working
// admin key it changes nothing. It returns the file's path and whether it
// wrote a new key.
func (a *Authenticator) EnsureAdmin(ctx context.Context, dataDir string) (path string, created bool, err error) {
	return "", false, fmt.Errorf("ensure admin: %w", errdefs.ErrUnavailable)
}
