package portproxy

import (
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

const testID = "sbx_01jf3k5m7p9r1t3v5x7z9b1d3f"

func TestParseHost(t *testing.T) {
	for _, c := range []struct {
		host, domain string
		port         uint16
		id           string
		ok, bad      bool
	}{
		{host: "8080-" + testID + ".localhost", domain: "localhost", port: 8080, id: testID, ok: true},
		{host: "8080-" + testID + ".localhost:8443", domain: "localhost", port: 8080, id: testID, ok: true},
		{host: "3000-" + strings.ToUpper(testID) + ".Preview.Example.COM", domain: "preview.example.com", port: 3000, id: testID, ok: true},
		{host: "1-" + testID + ".localhost.", domain: "localhost", port: 1, id: testID, ok: true},
		{host: "65535-" + testID + ".localhost", domain: "localhost.", port: 65535, id: testID, ok: true},
		// Not under the preview domain: the API's.
		{host: "localhost:8080", domain: "localhost"},
		{host: "127.0.0.1:8080", domain: "localhost"},
		{host: "[::1]:8080", domain: "localhost"},
		{host: "api.example.com", domain: "preview.example.com"},
		{host: "8080-" + testID + ".evillocalhost", domain: "localhost"},
		{host: "", domain: "localhost"},
		{host: "8080-" + testID + ".localhost", domain: ""},
		// Under it but malformed: 400.
		{host: "0-" + testID + ".localhost", domain: "localhost", ok: true, bad: true},
		{host: "65536-" + testID + ".localhost", domain: "localhost", ok: true, bad: true},
		{host: "080-" + testID + ".localhost", domain: "localhost", ok: true, bad: true},
		{host: "-8080-" + testID + ".localhost", domain: "localhost", ok: true, bad: true},
		{host: "x8080-" + testID + ".localhost", domain: "localhost", ok: true, bad: true},
		{host: "8080" + testID + ".localhost", domain: "localhost", ok: true, bad: true},
		{host: "8080-sbx_short.localhost", domain: "localhost", ok: true, bad: true},
		{host: "8080-sbx_01jf3k5m7p9r1t3v5x7z9b1d3u.localhost", domain: "localhost", ok: true, bad: true}, // u is not Crockford
		{host: "8080-" + testID + "x.localhost", domain: "localhost", ok: true, bad: true},
		{host: "a.8080-" + testID + ".localhost", domain: "localhost", ok: true, bad: true},
		{host: "8080-" + testID + ".localhost:http", domain: "localhost", ok: true, bad: true},
		{host: "8080-" + testID + ".localhost:99999", domain: "localhost", ok: true, bad: true},
		{host: ".localhost", domain: "localhost", ok: true, bad: true},
	} {
		port, id, ok, err := ParseHost(c.host, c.domain)
		if ok != c.ok || (err != nil) != c.bad || port != c.port || id != c.id {
			t.Errorf("ParseHost(%q, %q) = %d, %q, %v, %v; want %d, %q, %v, bad %v", c.host, c.domain, port, id, ok, err, c.port, c.id, c.ok, c.bad)
		}
		if err != nil && errdefs.ClassOf(err) != errdefs.ErrInvalidArgument {
			t.Errorf("ParseHost(%q): %v, want invalid_argument", c.host, err)
		}
	}
}

// FuzzParseHost: whatever the Host, ParseHost never panics, a host it
// accepts names a valid port and sandbox id under the domain, and an
// error is always a 400 of a host that is the proxy's.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"8080-" + testID + ".localhost", "8080-" + testID + ".localhost:80", "localhost:8080",
		"[::1]:1", "0-x.localhost", "1-sbx_.localhost", "a.b.c.localhost", ":", "-.localhost", "\x00.localhost"} {
		f.Add(s, "localhost")
	}
	f.Add("3000-"+testID+".p.example.com", "p.example.com")
	f.Fuzz(func(t *testing.T, host, domain string) {
		port, id, ok, err := ParseHost(host, domain)
		if !ok {
			if err != nil || port != 0 || id != "" {
				t.Fatalf("not ours but %d %q %v", port, id, err)
			}
			return
		}
		if err != nil {
			if errdefs.ClassOf(err) != errdefs.ErrInvalidArgument || port != 0 || id != "" {
				t.Fatalf("bad host answered %d %q %v", port, id, err)
			}
			return
		}
		if port == 0 || !validSandboxID(id) {
			t.Fatalf("accepted %q as %d %q", host, port, id)
		}
		if !strings.Contains(strings.ToLower(host), "."+strings.TrimSuffix(strings.ToLower(domain), ".")) {
			t.Fatalf("accepted %q outside %q", host, domain)
		}
	})
}

func TestDomainURL(t *testing.T) {
	for _, c := range []struct {
		d       Domain
		apiHost string
		want    string
	}{
		{Domain{Name: "localhost"}, "127.0.0.1:8080", "http://8080-" + testID + ".localhost:8080/"},
		{Domain{Name: "localhost"}, "localhost:80", "http://8080-" + testID + ".localhost/"},
		{Domain{Name: "localhost"}, "localhost", "http://8080-" + testID + ".localhost/"},
		{Domain{Name: "p.example.com", TLS: true}, "api.example.com", "https://8080-" + testID + ".p.example.com/"},
		{Domain{Name: "p.example.com", TLS: true}, "api.example.com:443", "https://8080-" + testID + ".p.example.com/"},
		{Domain{Name: "p.example.com", TLS: true}, "api.example.com:8443", "https://8080-" + testID + ".p.example.com:8443/"},
	} {
		if got := c.d.URL(testID, 8080, c.apiHost); got != c.want {
			t.Errorf("%+v.URL(%q) = %q, want %q", c.d, c.apiHost, got, c.want)
		}
	}
}
