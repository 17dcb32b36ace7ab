package objstore

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Location says where a Store keeps its objects: a bucket on an
// S3-compatible endpoint, and a key prefix inside it (so several SPACE
// installations can share one bucket).
type Location struct {
	Endpoint string // host:port
	Secure   bool   // HTTPS (the default); false for a loopback test server
	Region   string
	Bucket   string
	Prefix   string // "" or a clean key prefix without slashes at either end
}

// bucketName is the S3 rule: 3–63 lowercase letters, digits, dots, hyphens.
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// ParseURL reads a location from its URL form:
//
//	s3://bucket/prefix?endpoint=host:port&region=us-east-1&tls=false
//
// endpoint is required (there is no default cloud); region defaults to
// us-east-1 and tls to true. Credentials never go in the URL: see
// LoadCredentials.
func ParseURL(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("object store url: %w: not a URL", errdefs.ErrInvalidArgument)
	}
	if u.Scheme != "s3" {
		return Location{}, fmt.Errorf("object store url: %w: scheme must be s3", errdefs.ErrInvalidArgument)
	}
	if u.User != nil {
		return Location{}, fmt.Errorf("object store url: %w: credentials do not belong in the URL", errdefs.ErrInvalidArgument)
	}
	if !bucketName.MatchString(u.Host) {
		return Location{}, fmt.Errorf("object store url: %w: bucket %q is not a valid bucket name", errdefs.ErrInvalidArgument, u.Host)
	}
	loc := Location{Bucket: u.Host, Secure: true, Region: "us-east-1"}
	if prefix := strings.Trim(u.Path, "/"); prefix != "" {
		if err := checkKeyPath(prefix); err != nil {
			return Location{}, fmt.Errorf("object store url: prefix: %w", err)
		}
		loc.Prefix = prefix
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "tls":
		default:
			return Location{}, fmt.Errorf("object store url: %w: unknown parameter %q", errdefs.ErrInvalidArgument, k)
		}
	}
	loc.Endpoint = q.Get("endpoint")
	if _, port, err := net.SplitHostPort(loc.Endpoint); err != nil || port == "" {
		return Location{}, fmt.Errorf("object store url: %w: endpoint must be host:port", errdefs.ErrInvalidArgument)
	}
	if r := q.Get("region"); r != "" {
		loc.Region = r
	}
	switch q.Get("tls") {
	case "", "true":
	case "false":
		loc.Secure = false
	default:
		return Location{}, fmt.Errorf("object store url: %w: tls must be true or false", errdefs.ErrInvalidArgument)
	}
	return loc, nil
}

// String is the URL form of the location (it holds no secret).
func (l Location) String() string {
	q := url.Values{"endpoint": {l.Endpoint}, "region": {l.Region}}
	if !l.Secure {
		q.Set("tls", "false")
	}
	u := url.URL{Scheme: "s3", Host: l.Bucket, Path: "/" + l.Prefix, RawQuery: q.Encode()}
	return u.String()
}

// Credentials are the S3 access key pair. They print and log redacted.
type Credentials struct {
	AccessKey string
	SecretKey string
}

// String never shows the secret key.
func (c Credentials) String() string {
	return fmt.Sprintf("access key %q, secret key redacted", c.AccessKey)
}

// GoString keeps %#v from printing the secret.
func (c Credentials) GoString() string { return c.String() }

// LogValue keeps slog from printing the secret.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("access_key", c.AccessKey), slog.String("secret_key", "redacted"))
}

// Environment variables LoadCredentials reads when no file is given.
const (
	EnvAccessKey = "SPACE_S3_ACCESS_KEY"
	EnvSecretKey = "SPACE_S3_SECRET_KEY"
)

// LoadCredentials reads the key pair from file when it is not empty, else
// from the environment (SPACE_S3_ACCESS_KEY, SPACE_S3_SECRET_KEY). The file
// holds lines "access_key=…" and "secret_key=…" (blank lines and lines
// starting with # are ignored) and must not be readable by group or others.
func LoadCredentials(file string) (Credentials, error) {
	var c Credentials
	if file == "" {
		c = Credentials{AccessKey: os.Getenv(EnvAccessKey), SecretKey: os.Getenv(EnvSecretKey)}
		if c.AccessKey == "" || c.SecretKey == "" {
			return Credentials{}, fmt.Errorf("object store credentials: %w: set %s and %s, or give a credentials file",
				errdefs.ErrInvalidArgument, EnvAccessKey, EnvSecretKey)
		}
		return c, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return Credentials{}, fmt.Errorf("object store credentials file: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Credentials{}, fmt.Errorf("object store credentials file: %w: %v", errdefs.ErrInternal, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return Credentials{}, fmt.Errorf("object store credentials file %s: %w: readable by group or others (mode %v)",
			file, errdefs.ErrPermissionDenied, fi.Mode().Perm())
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		switch key = strings.TrimSpace(key); {
		case !ok:
			// The line is not echoed: it may be a secret without its key.
			return Credentials{}, fmt.Errorf("object store credentials file %s line %d: %w: want key=value", file, n, errdefs.ErrInvalidArgument)
		case key == "access_key":
			c.AccessKey = strings.TrimSpace(value)
		case key == "secret_key":
			c.SecretKey = strings.TrimSpace(value)
		default:
			return Credentials{}, fmt.Errorf("object store credentials file %s line %d: %w: unknown key %q", file, n, errdefs.ErrInvalidArgument, key)
		}
	}
	if err := sc.Err(); err != nil {
		return Credentials{}, fmt.Errorf("object store credentials file %s: %w: %v", file, errdefs.ErrInvalidArgument, err)
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return Credentials{}, fmt.Errorf("object store credentials file %s: %w: needs access_key and secret_key", file, errdefs.ErrInvalidArgument)
	}
	return c, nil
}

// keySegment is what one segment of a name or prefix may hold: no spaces,
// no control characters, nothing S3 or a shell would treat specially.
var keySegment = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:=+@-]{0,127}$`)

// checkKeyPath validates a slash-separated name or prefix.
func checkKeyPath(p string) error {
	if p == "" || len(p) > 512 {
		return fmt.Errorf("%w: name must be 1 to 512 characters", errdefs.ErrInvalidArgument)
	}
	for _, seg := range strings.Split(p, "/") {
		if !keySegment.MatchString(seg) {
			return fmt.Errorf("%w: %q: each part of a name starts with a letter or digit and holds only letters, digits and ._:=+@-",
				errdefs.ErrInvalidArgument, p)
		}
	}
	return nil
}
