package egress

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

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

func TestGuardRefuses(t *testing.T) {
	none := newGuard(prefixes("172.31.0.0/30"), nil)
	lab := newGuard(prefixes("172.31.0.0/30", "10.96.0.0/12"),
		prefixes("10.0.0.0/8", "169.254.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "::ffff:192.168.7.0/120"))
	metadata := newGuard(nil, prefixes("169.254.169.254/32"))
	for _, tc := range []struct {
		g    *guard
		addr string
		want string
	}{
		{none, "127.0.0.1", whyForbidden}, {none, "0.0.0.0", whyForbidden}, {none, "224.0.0.1", whyForbidden},
		{none, "255.255.255.255", whyForbidden}, {none, "240.0.0.1", whyForbidden}, {none, "172.31.0.2", whyForbidden},
		{none, "::1", whyForbidden}, {none, "2001:db8::1", whyForbidden}, {none, "fd00:ec2::254", whyForbidden},
		{none, "10.1.2.3", whyPrivate}, {none, "172.16.0.1", whyPrivate}, {none, "172.31.255.1", whyPrivate},
		{none, "192.168.1.1", whyPrivate}, {none, "100.64.0.1", whyPrivate}, {none, "100.127.255.254", whyPrivate},
		{none, "169.254.169.254", whyPrivate}, {none, "169.254.1.1", whyPrivate}, {none, "192.0.0.8", whyPrivate},
		{none, "198.18.0.1", whyPrivate}, {none, "198.19.255.1", whyPrivate}, {none, "::ffff:10.0.0.1", whyPrivate},
		{none, "203.0.113.9", ""}, {none, "198.20.0.1", ""}, {none, "100.128.0.1", ""}, {none, "172.32.0.1", ""},
		{none, "8.8.8.8", ""}, {none, "11.0.0.1", ""},
		// The operator's allow-list opens what it covers, never the
		// never-ranges, its own deny list or a metadata address it does
		// not name exactly.
		{lab, "10.1.2.3", ""}, {lab, "10.96.0.1", whyForbidden}, {lab, "10.111.255.255", whyForbidden},
		{lab, "172.31.0.2", whyForbidden}, {lab, "127.0.0.1", whyForbidden}, {lab, "169.254.1.1", ""},
		{lab, "169.254.169.254", whyPrivate}, {lab, "100.64.0.1", ""}, {lab, "100.100.100.200", whyPrivate},
		{lab, "192.168.7.9", ""}, {lab, "192.168.8.9", whyPrivate}, {lab, "172.16.0.1", whyPrivate},
		{metadata, "169.254.169.254", ""}, {metadata, "169.254.169.253", whyPrivate},
	} {
		if got := tc.g.refuse(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("refuse(%s) = %q, want %q (allow-private %v, extra %v)", tc.addr, got, tc.want, tc.g.allowPrivate, tc.g.extra)
		}
	}
}

// The dial the proxy makes is judged by the address it is given, never a
// name, and the default dialer judges the address it connects to.
func TestGuardCheckedDial(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	g := newGuard(nil, nil)
	reached := 0
	dial := g.checkedDial(func(ctx context.Context, network, addr string) (net.Conn, error) {
		reached++
		return nil, errors.New("not dialled in this test")
	})
	for _, addr := range []string{"127.0.0.1:" + port, "localhost:" + port, "10.0.0.1:80", "[::1]:80", "198.18.0.1:80"} {
		if _, err := dial(context.Background(), "tcp4", addr); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("dial %s: %v, want the guard's refusal", addr, err)
		}
	}
	if reached != 0 {
		t.Errorf("the dialer was called %d times for refused addresses", reached)
	}
	if _, err := dial(context.Background(), "tcp4", "203.0.113.9:80"); err == nil || errors.Is(err, errdefs.ErrPermissionDenied) || reached != 1 {
		t.Errorf("a public address was not handed to the dialer: %v (%d calls)", err, reached)
	}
	// A name resolved inside the dialer is judged at connect(2).
	d := net.Dialer{Timeout: 5 * time.Second, Control: g.control}
	if c, err := d.DialContext(context.Background(), "tcp4", "localhost:"+port); err == nil {
		c.Close()
		t.Fatal("the default dialer connected to loopback through a name")
	} else if !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("dial localhost: %v, want the guard's refusal", err)
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"10.0.0.0/8, 192.168.1.7", "", "fd00::/8,::ffff:172.16.0.0/108", "10.1.2.3/16"})
	if err != nil {
		t.Fatal(err)
	}
	want := prefixes("10.0.0.0/8", "192.168.1.7/32", "fd00::/8", "172.16.0.0/12", "10.1.0.0/16")
	if !slices.Equal(got, want) {
		t.Errorf("ParsePrefixes = %v, want %v", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0", "fe80::1%eth0/64"} {
		if _, err := ParsePrefixes([]string{bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParsePrefixes(%q): %v, want invalid_argument", bad, err)
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

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}
