package egress

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/space-sandbox/space/internal/errdefs"
)

func TestParsePolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		json string
		bad  string // field expected in details; "" = valid
	}{
		{`{"egress":{"allow":["pypi.org","*.github.com","203.0.113.0/24","10.1.2.3"]}}`, ""},
		{`{"egress":{"default":"allow","deny":["evil.test"]}}`, ""},
		{`{"egress":{"default":"maybe"}}`, "network.egress.default"},
		{`{"egress":{"allow":["*"]}}`, "network.egress.allow[0]"},
		{`{"egress":{"allow":["a.*.com"]}}`, "network.egress.allow[0]"},
		{`{"egress":{"allow":["ok.test","bad_label-.x"]}}`, "network.egress.allow[1]"},
		{`{"egress":{"allow":["2001:db8::/32"]}}`, "network.egress.allow[0]"},
		{`{"egress":{"deny":["10.0.0.0/33"]}}`, "network.egress.deny[0]"},
		{`{"egress":{},"inject":[{"domain":"10.0.0.0/8","header":"X","value":"v"}]}`, "network.inject[0].domain"},
		{`{"egress":{},"inject":[{"domain":"a.test","header":"Host","value":"v"}]}`, "network.inject[0].header"},
		{`{"egress":{},"inject":[{"domain":"a.test","header":"X-A","value":"${env:HOME}"}]}`, "network.inject[0].value"},
		{`{"egress":{},"inject":[{"domain":"a.test","header":"X-A","value":"a\r\nb"}]}`, "network.inject[0].value"},
		{`{"egress":{},"inject":[{"domain":"*.a.test","header":"Authorization","value":"Bearer ${secret:k1} ${secret:k2}"}]}`, ""},
	} {
		_, err := ParsePolicy([]byte(tc.json))
		if tc.bad == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.json, err)
			}
			continue
		}
		var pe *errdefs.Public
		if !errors.As(err, &pe) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: want invalid_argument, got %v", tc.json, err)
			continue
		}
		if _, ok := pe.Details[tc.bad]; !ok {
			t.Errorf("%s: details %v lack %s", tc.json, pe.Details, tc.bad)
		}
	}
	if _, err := ParsePolicy([]byte(`{"egress":{},"extra":1}`)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("unknown field: %v", err)
	}
}

func TestRulesDecide(t *testing.T) {
	r, err := compile(Policy{Egress: Egress{
		Allow: []string{"pypi.org", "*.github.com", "203.0.113.0/24"},
		Deny:  []string{"evil.github.com", "203.0.113.7"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"pypi.org": true, "www.pypi.org": false, "github.com": false, "api.github.com": true,
		"a.b.github.com": true, "evil.github.com": false, "xgithub.com": false, "other.test": false,
	} {
		if got, rule := r.decideName(name); got != want {
			t.Errorf("decideName(%s) = %v (%s), want %v", name, got, rule, want)
		}
	}
	for a, want := range map[string]bool{"203.0.113.1": true, "203.0.113.7": false, "203.0.114.1": false} {
		if got, _ := r.decideAddr(netip.MustParseAddr(a)); got != want {
			t.Errorf("decideAddr(%s) = %v, want %v", a, got, want)
		}
	}
}

func TestGuardForbidden(t *testing.T) {
	g := &guard{extra: []netip.Prefix{netip.MustParsePrefix("172.31.0.0/30")}}
	for a, want := range map[string]bool{
		"127.0.0.1": true, "169.254.169.254": true, "0.0.0.0": true, "224.0.0.1": true,
		"255.255.255.255": true, "172.31.0.2": true, "::1": true, "2001:db8::1": true,
		"203.0.113.9": false,
	} {
		if got := g.forbidden(netip.MustParseAddr(a)); got != want {
			t.Errorf("forbidden(%s) = %v, want %v", a, got, want)
		}
	}
}

func TestScrubAcrossReads(t *testing.T) {
	secret := "tok-ABCDEFGH"
	sc := newScrubber([]string{secret})
	body := strings.Repeat("x", 100) + secret + "y" + "dG9rLUFCQ0RFRkdI" + strings.Repeat("z", 7)
	// One byte per read: every boundary splits a secret somewhere.
	got, err := io.ReadAll(sc.reader(iotest.OneByteReader(strings.NewReader(body))))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(body) {
		t.Fatalf("length %d, want %d", len(got), len(body))
	}
	if bytes.Contains(got, []byte(secret)) || bytes.Contains(got, []byte("dG9rLUFCQ0RFRkdI")) {
		t.Fatalf("secret survived: %s", got)
	}
	if !bytes.HasPrefix(got, []byte(strings.Repeat("x", 100)+"************y")) {
		t.Fatalf("unexpected output %s", got)
	}
}

// TestValidLabel checks the hand-written label rule against the regular
// expression it replaced, on every string up to 3 bytes over an alphabet
// of each byte class, and at the length limits.
func TestValidLabel(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)
	alpha := []string{"a", "z", "0", "9", "_", "-", "A", ".", "é", " "}
	var all []string
	var grow func(s string, n int)
	grow = func(s string, n int) {
		all = append(all, s)
		if n == 0 {
			return
		}
		for _, a := range alpha {
			grow(s+a, n-1)
		}
	}
	grow("", 3)
	for _, n := range []int{61, 62, 63, 64, 65} {
		all = append(all, strings.Repeat("a", n), "-"+strings.Repeat("a", n-1), strings.Repeat("a", n-1)+"-", "a"+strings.Repeat("-", n-2)+"a")
	}
	for _, s := range all {
		if got, want := validLabel(s), re.MatchString(s); got != want {
			t.Errorf("validLabel(%q) = %v, the expression says %v", s, got, want)
		}
	}
}
