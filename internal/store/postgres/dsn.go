package postgres

import (
	"net/url"
	"regexp"
	"strings"
)

// IsDSN reports whether s names a PostgreSQL database by URL
// (postgres:// or postgresql://), as the server's --store flag takes it.
func IsDSN(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// kvPassword matches a password in key=value form, quoted or not.
var kvPassword = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// Redact returns dsn without its password, fit for logs and errors.
func Redact(dsn string) string {
	if IsDSN(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(unparsable PostgreSQL URL)"
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return kvPassword.ReplaceAllString(dsn, "password=xxxxx")
}

// passwords are the password candidates in dsn, best effort even when it
// does not parse.
func passwords(dsn string) []string {
	var out []string
	if u, err := url.Parse(dsn); err == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p)
		}
		if p := u.Query().Get("password"); p != "" {
			out = append(out, p)
		}
	}
	// The raw userinfo, for URLs url.Parse refuses.
	if rest, ok := strings.CutPrefix(dsn, "postgres://"); ok || strings.HasPrefix(dsn, "postgresql://") {
		if !ok {
			rest = strings.TrimPrefix(dsn, "postgresql://")
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, p, found := strings.Cut(rest[:at], ":"); found && p != "" {
				out = append(out, p)
				if dec, err := url.PathUnescape(p); err == nil && dec != p {
					out = append(out, dec)
				}
			}
		}
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		if p := strings.Trim(m[1], "'"); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// scrub returns err's message with every password candidate of secret (a
// DSN or a bare password) replaced, so a driver's message cannot leak one.
func scrub(err error, secret string) string {
	msg := err.Error()
	cands := passwords(secret)
	if !IsDSN(secret) && !strings.Contains(secret, "=") && secret != "" {
		cands = append(cands, secret) // a bare password
	}
	for _, p := range cands {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return msg
}
