package remote

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// MinTokenBytes is the shortest token a server or client accepts.
const MinTokenBytes = 32

// Token is the internal token of the worker protocol: a shared secret the
// control plane sends with every call (Authorization: Bearer <token>). Its
// String never shows it.
type Token struct{ secret []byte }

// NewToken makes a Token of secret (at least MinTokenBytes bytes, no
// whitespace).
func NewToken(secret string) (Token, error) {
	t := Token{secret: []byte(secret)}
	return t, t.valid()
}

func (t Token) valid() error {
	switch {
	case len(t.secret) < MinTokenBytes:
		return fmt.Errorf("worker token: %d bytes, want at least %d", len(t.secret), MinTokenBytes)
	case bytes.ContainsAny(t.secret, " \t\r\n"):
		return errors.New("worker token: contains whitespace")
	}
	return nil
}

// String hides the secret (a Token in a log line says only that it is one).
func (t Token) String() string { return "[worker token]" }

// GoString hides it from %#v too.
func (t Token) GoString() string { return t.String() }

// LogValue hides it from slog.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// header is the Authorization header value a client sends.
func (t Token) header() string { return "Bearer " + string(t.secret) }

// check returns "" when header carries the token, else why not ("missing"
// or "wrong"; never anything of either token). The comparison takes the
// same time whatever got is: both sides are hashed to 32 bytes first, so
// neither a wrong length nor a common prefix shows in the timing.
func (t Token) check(header string) string {
	got, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || got == "" {
		return "missing"
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256(t.secret)
	if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		return "wrong"
	}
	return ""
}

// LoadToken reads the token in path (surrounding whitespace trimmed).
func LoadToken(path string) (Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Token{}, fmt.Errorf("worker token: %w", err)
	}
	t, err := NewToken(strings.TrimSpace(string(b)))
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// EnsureToken loads the token in path, first writing a new random one
// there (mode 0600) when the file does not exist. created says it did.
func EnsureToken(path string) (t Token, created bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return Token{}, false, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return Token{}, false, fmt.Errorf("worker token: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return Token{}, false, fmt.Errorf("worker token: %w", err)
		}
		_, werr := f.WriteString(hex.EncodeToString(secret) + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(path)
			return Token{}, false, fmt.Errorf("worker token: %w", werr)
		}
		created = true
	}
	t, err = LoadToken(path)
	return t, created, err
}
