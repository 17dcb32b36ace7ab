package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/strictjson"
)

// Policy is a sandbox's network object, as docs/api.md ("The network
// policy") describes it:
//
//	{egress: {default, allow, deny}, inject: [{domain, header, value}]}
type Policy struct {
	Egress Egress   `json:"egress"`
	Inject []Inject `json:"inject,omitempty"`
}

// Egress says what the guest may reach. Entries are domains ("pypi.org"),
// wildcards ("*.github.com": any name below github.com, not github.com
// itself), IPv4 CIDRs ("203.0.113.0/24") or IPv4 addresses. Deny wins over
// allow; Default ("deny" unless "allow") decides the rest.
type Egress struct {
	Default string   `json:"default,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Deny    []string `json:"deny,omitempty"`
}

// Inject adds (or replaces) Header on plain-HTTP requests to Domain. Value may
// name secrets as ${secret:NAME}; they are resolved for each request.
type Inject struct {
	Domain string `json:"domain"`
	Header string `json:"header"`
	Value  string `json:"value"`
}

// ParsePolicy decodes a network object strictly (unknown fields are an
// error) and validates it.
func ParsePolicy(data []byte) (Policy, error) {
	var p Policy
	if err := strictjson.Decode(data, &p); err != nil {
		// Field paths as Validate spells them, under "network".
		field := "network"
		var se *strictjson.Error
		if errors.As(err, &se) && se.Field != "" {
			field += "." + se.Field
		}
		problem := "is not a valid network object"
		if se != nil {
			problem = se.Problem
		}
		return Policy{}, errdefs.New(errdefs.ErrInvalidArgument, "%s: %s", field, problem).
			WithDetails(map[string]any{field: problem}).WithCause(err)
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Validate reports every invalid field as one ErrInvalidArgument whose
// details map the field path to the problem.
func (p Policy) Validate() error {
	bad := map[string]any{}
	switch p.Egress.Default {
	case "", "deny", "allow":
	default:
		bad["network.egress.default"] = `must be "deny" or "allow"`
	}
	for name, list := range map[string][]string{"allow": p.Egress.Allow, "deny": p.Egress.Deny} {
		for i, e := range list {
			if _, err := parseEntry(e); err != nil {
				bad[fmt.Sprintf("network.egress.%s[%d]", name, i)] = err.Error()
			}
		}
	}
	for i, in := range p.Inject {
		f := fmt.Sprintf("network.inject[%d]", i)
		if e, err := parseEntry(in.Domain); err != nil || e.isPrefix {
			bad[f+".domain"] = "must be a domain name or *.domain"
		}
		if !headerRE.MatchString(in.Header) || hopByHop[strings.ToLower(in.Header)] || strings.EqualFold(in.Header, "Host") {
			bad[f+".header"] = "must be an HTTP header name other than Host and hop-by-hop headers"
		}
		if _, err := parseTemplate(in.Value); err != nil {
			bad[f+".value"] = err.Error()
		}
		if strings.ContainsAny(in.Value, "\r\n\x00") {
			bad[f+".value"] = "must not contain CR, LF or NUL"
		}
	}
	if len(bad) > 0 {
		return errdefs.New(errdefs.ErrInvalidArgument, "invalid network policy").WithDetails(bad)
	}
	return nil
}

var (
	headerRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
	secretRE = regexp.MustCompile(`\$\{secret:([A-Za-z0-9_.-]{1,128})\}`)
	anyRefRE = regexp.MustCompile(`\$\{`)
	hopByHop = map[string]bool{"connection": true, "keep-alive": true, "proxy-connection": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true, "content-length": true}
)

// entry is one parsed allow/deny item.
type entry struct {
	raw      string
	domain   string // exact name, or the suffix for a wildcard
	wildcard bool
	prefix   netip.Prefix
	isPrefix bool
}

func parseEntry(s string) (entry, error) {
	e := entry{raw: s}
	if strings.ContainsAny(s, "/:") || (s != "" && (s[0] >= '0' && s[0] <= '9') && isAllDigitsDots(s)) {
		var p netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			p, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(s)
			if err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return e, fmt.Errorf("not a valid domain, IPv4 address or CIDR")
		}
		if !p.Addr().Is4() {
			return e, fmt.Errorf("IPv6 egress is not supported")
		}
		e.prefix, e.isPrefix = p.Masked(), true
		return e, nil
	}
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		e.wildcard, name = true, rest
	}
	if !validDomain(name) {
		return e, fmt.Errorf("not a valid domain, *.domain, IPv4 address or CIDR")
	}
	e.domain = name
	return e, nil
}

func isAllDigitsDots(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

func validDomain(name string) bool {
	if len(name) == 0 || len(name) > 253 {
		return false
	}
	for l := range strings.SplitSeq(name, ".") {
		if !validLabel(l) {
			return false
		}
	}
	return true
}

// validLabel says whether l is a DNS label as policies write them: 1 to 63
// of [a-z0-9_-], not starting or ending with '-' (by hand rather than by a
// regular expression: this runs on every proxied request's Host).
func validLabel(l string) bool {
	if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		b := l[i]
		if !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// normalizeName lower-cases and strips a trailing dot; "" if not a domain.
func normalizeName(s string) string {
	n := strings.TrimSuffix(strings.ToLower(s), ".")
	if !validDomain(n) || isAllDigitsDots(n) {
		return ""
	}
	return n
}

func (e entry) matchName(name string) bool {
	if e.isPrefix {
		return false
	}
	if e.wildcard {
		return strings.HasSuffix(name, "."+e.domain)
	}
	return name == e.domain
}

// template is an inject value split into literal text and secret names.
type template struct {
	parts []tmplPart
}

type tmplPart struct {
	lit    string
	secret string
}

func parseTemplate(v string) (template, error) {
	var t template
	rest := v
	for {
		loc := secretRE.FindStringSubmatchIndex(rest)
		if loc == nil {
			if anyRefRE.MatchString(rest) {
				return t, fmt.Errorf("only ${secret:NAME} references are supported")
			}
			if rest != "" {
				t.parts = append(t.parts, tmplPart{lit: rest})
			}
			return t, nil
		}
		if anyRefRE.MatchString(rest[:loc[0]]) {
			return t, fmt.Errorf("only ${secret:NAME} references are supported")
		}
		if loc[0] > 0 {
			t.parts = append(t.parts, tmplPart{lit: rest[:loc[0]]})
		}
		t.parts = append(t.parts, tmplPart{secret: rest[loc[2]:loc[3]]})
		rest = rest[loc[1]:]
	}
}

// rules is a compiled Policy.
type rules struct {
	defaultAllow bool
	allow, deny  []entry
	inject       []compiledInject
}

type compiledInject struct {
	match  entry
	header string
	value  template
}

func compile(p Policy) (*rules, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	r := &rules{defaultAllow: p.Egress.Default == "allow"}
	for _, s := range p.Egress.Allow {
		e, _ := parseEntry(s)
		r.allow = append(r.allow, e)
	}
	for _, s := range p.Egress.Deny {
		e, _ := parseEntry(s)
		r.deny = append(r.deny, e)
	}
	for _, in := range p.Inject {
		e, _ := parseEntry(in.Domain)
		t, _ := parseTemplate(in.Value)
		r.inject = append(r.inject, compiledInject{match: e, header: in.Header, value: t})
	}
	return r, nil
}

// decideName says whether a connection naming host (HTTP Host or TLS SNI)
// may proceed, and which rule decided.
func (r *rules) decideName(host string) (bool, string) {
	for _, e := range r.deny {
		if e.matchName(host) {
			return false, "deny " + e.raw
		}
	}
	for _, e := range r.allow {
		if e.matchName(host) {
			return true, "allow " + e.raw
		}
	}
	if r.defaultAllow {
		return true, "default allow"
	}
	return false, "default deny"
}

// decideAddr says whether a connection to addr, identified by nothing but
// its address, may proceed. Only CIDR entries (and default allow) allow it.
func (r *rules) decideAddr(a netip.Addr) (bool, string) {
	for _, e := range r.deny {
		if e.isPrefix && e.prefix.Contains(a) {
			return false, "deny " + e.raw
		}
	}
	for _, e := range r.allow {
		if e.isPrefix && e.prefix.Contains(a) {
			return true, "allow " + e.raw
		}
	}
	if r.defaultAllow {
		return true, "default allow"
	}
	return false, "default deny"
}

// injectionsFor returns the inject rules for host.
func (r *rules) injectionsFor(host string) []compiledInject {
	var out []compiledInject
	for _, in := range r.inject {
		if in.match.matchName(host) {
			out = append(out, in)
		}
	}
	return out
}

// deniedAddr reports whether a deny CIDR covers a, whatever allowed the name.
func (r *rules) deniedAddr(a netip.Addr) (bool, string) {
	for _, e := range r.deny {
		if e.isPrefix && e.prefix.Contains(a) {
			return true, "deny " + e.raw
		}
	}
	return false, ""
}
