package portproxy

import (
	"net"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
)

// sandboxIDLen is the length of a sandbox id: "sbx_" and 26 characters
// of lower-case Crockford base32 (store.NewID).
const sandboxIDLen = 4 + 26

// ParseHost reads a preview host, {port}-{sandbox_id}.{previewDomain}
// with an optional :port of the listener, case-insensitively. ok is false
// when host is not under previewDomain at all (the request is not the
// proxy's); a host under it that does not parse is ok with an
// invalid_argument error, answered 400 before any guest is reached.
func ParseHost(host, previewDomain string) (port uint16, sandboxID string, ok bool, err error) {
	domain := strings.TrimSuffix(strings.ToLower(previewDomain), ".")
	if domain == "" {
		return 0, "", false, nil
	}
	h := strings.ToLower(host)
	if strings.HasPrefix(h, "[") { // an IPv6 literal is never a preview host
		return 0, "", false, nil
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if _, perr := strconv.ParseUint(h[i+1:], 10, 16); perr != nil {
			if !strings.HasSuffix(h[:i], "."+domain) {
				return 0, "", false, nil
			}
			return 0, "", true, errdefs.New(errdefs.ErrInvalidArgument, "preview host: malformed listener port")
		}
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	label, under := strings.CutSuffix(h, "."+domain)
	if !under {
		return 0, "", false, nil
	}
	bad := func(why string) (uint16, string, bool, error) {
		return 0, "", true, errdefs.New(errdefs.ErrInvalidArgument, "preview host must be {port}-{sandbox_id}.%s: %s", domain, why)
	}
	ps, id, found := strings.Cut(label, "-")
	if !found {
		return bad("no port")
	}
	p, perr := strconv.ParseUint(ps, 10, 16)
	if perr != nil || p == 0 || ps[0] == '0' {
		return bad("the port must be 1-65535")
	}
	if !validSandboxID(id) {
		return bad("not a sandbox id")
	}
	return uint16(p), id, true, nil
}

// validSandboxID accepts what store.NewID makes for sandboxes.
func validSandboxID(id string) bool {
	if len(id) != sandboxIDLen || !strings.HasPrefix(id, "sbx_") {
		return false
	}
	for _, c := range id[4:] {
		if !strings.ContainsRune("0123456789abcdefghjkmnpqrstvwxyz", c) {
			return false
		}
	}
	return true
}

// Domain is where preview URLs live: {port}-{sandbox_id}.{Name} on the
// main listener, over https when that listener serves TLS.
type Domain struct {
	Name string
	TLS  bool
}

// URL is the preview URL of port in sandboxID for a client that reached
// the API at apiHost (a Host header): the preview host is on the same
// listener, so it keeps apiHost's port unless that is the scheme's
// default.
func (d Domain) URL(sandboxID string, port uint16, apiHost string) string {
	scheme, def := "http", "80"
	if d.TLS {
		scheme, def = "https", "443"
	}
	host := strconv.Itoa(int(port)) + "-" + sandboxID + "." + d.Name
	if _, p, err := net.SplitHostPort(apiHost); err == nil && p != "" && p != def {
		host = net.JoinHostPort(host, p)
	}
	return scheme + "://" + host + "/"
}
