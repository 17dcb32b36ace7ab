package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/testenv"
)

// The upstream hosts of TestNetwork: two HTTP servers in a network
// namespace of the test's own, reached by name through /etc/hosts (the
// documented way: the egress proxy resolves with the host's resolver).
const (
	allowedHost = "allowed.e2e.space.test"
	otherHost   = "other.e2e.space.test"
	e2eSecret   = "sk-e2e-5d41402abc4b2a76b9719d911017c592"
)

var (
	upHostSide = netip.MustParseAddr("198.18.201.1")
	upAllowed  = netip.MustParseAddr("198.18.201.2")
	upOther    = netip.MustParseAddr("198.18.201.3")
)

// upstream records the requests each server got.
type upstream struct {
	ns   string // the upstreams' network namespace (path)
	mu   sync.Mutex
	seen map[string][]http.Header // by server label
}

func (u *upstream) headers(label string) []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen[label]...)
}

// startUpstream makes namespace e2e-up-<pid> (testenv.UpstreamNet) with an
// echo server on upAllowed and upOther, port 80, and maps the two names in
// /etc/hosts (removed at cleanup).
func startUpstream(t *testing.T) *upstream {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ns := testenv.UpstreamNet(t, fmt.Sprintf("e2e-up-%d", os.Getpid()), "e2e", upHostSide, upAllowed, upOther)

	u := &upstream{ns: ns, seen: map[string][]http.Header{}}
	for label, a := range map[string]netip.Addr{"allowed": upAllowed, "other": upOther} {
		var l net.Listener
		must(network.InNamespace(ns, func() (err error) {
			l, err = net.Listen("tcp4", net.JoinHostPort(a.String(), "80"))
			return err
		}))
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.mu.Lock()
			u.seen[label] = append(u.seen[label], r.Header.Clone())
			u.mu.Unlock()
			// Echo every request header back: a leak path the proxy must scrub.
			w.Header().Set("X-Echo-Api-Key", r.Header.Get("X-Api-Key"))
			fmt.Fprintf(w, "server=%s host=%s\n", label, r.Host)
			r.Header.Write(w)
		})}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	}

	testenv.AddHosts(t, map[string]netip.Addr{allowedHost: upAllowed, otherHost: upOther})
	return u
}

// sh runs a shell command in the sandbox and returns its exit code and output.
func sh(t *testing.T, c *client, sbx, cmd string) (int, string) {
	t.Helper()
	var res apiv1.ExecResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx+"/exec", map[string]any{"shell": cmd, "timeout_seconds": 60}, &res, 200)
	if res.ExitCode == nil {
		t.Fatalf("%q ended %s", cmd, res.Reason)
	}
	return *res.ExitCode, res.Stdout + res.Stderr
}

func TestNetwork(t *testing.T) {
	u := startUpstream(t)
	// The upstreams are in the benchmarking range, which is private: the
	// test allows it as an operator would a lab network.
	srv := startServer(t, "--feature", "network_log", "--egress-allow-private", "198.18.0.0/15")
	c := srv.client(newTenantKey(t, srv, "netco"))

	var sec apiv1.Secret
	c.mustDo("PUT", "/v1/secrets/e2e-token", map[string]string{"value": e2eSecret}, &sec, 201)
	var secs apiv1.SecretList
	c.mustDo("GET", "/v1/secrets", nil, &secs, 200)
	if len(secs.Secrets) != 1 || secs.Secrets[0].Name != "e2e-token" {
		t.Fatalf("secrets list %+v", secs)
	}

	policy := map[string]any{
		"egress": map[string]any{"default": "deny", "allow": []string{allowedHost}},
		"inject": []map[string]string{{"domain": allowedHost, "header": "X-Api-Key", "value": "Bearer ${secret:e2e-token}"}},
	}
	sbx := c.createSandbox(map[string]any{"network": policy})
	t.Cleanup(func() { c.deleteSandbox(sbx.ID) })
	if !strings.Contains(string(sbx.Network), "${secret:e2e-token}") || strings.Contains(string(sbx.Network), e2eSecret) {
		t.Fatalf("GET network = %s", sbx.Network)
	}

	// busybox 1.35's wget crashes with -T; timeout(1) bounds it instead.
	// Each response goes to its own file (the allowed one is kept in
	// /tmp/resp.txt for the secret search).
	n := 0
	wget := func(url string) (int, string) {
		n++
		f := fmt.Sprintf("/tmp/resp-%d.txt", n)
		if strings.Contains(url, allowedHost) && n == 1 {
			f = "/tmp/resp.txt"
		}
		return sh(t, c, sbx.ID, fmt.Sprintf("timeout 20 wget -q -O %s %s; rc=$?; cat %s 2>/dev/null; exit $rc", f, url, f))
	}
	// blocked checks that a fetch failed by being refused, not by crashing.
	blocked := func(t *testing.T, code int, out string) {
		t.Helper()
		if code == 0 || code >= 128 || strings.Contains(out, "server=") {
			t.Fatalf("not refused: exit %d: %s", code, out)
		}
		t.Logf("refused: exit %d: %s", code, strings.TrimSpace(out))
	}
	t.Run("allowed domain reachable, credential injected", func(t *testing.T) {
		code, out := wget("http://" + allowedHost + "/")
		if code != 0 || !strings.Contains(out, "server=allowed") {
			t.Fatalf("wget allowed: exit %d: %s", code, out)
		}
		hs := u.headers("allowed")
		if len(hs) == 0 || hs[len(hs)-1].Get("X-Api-Key") != "Bearer "+e2eSecret {
			t.Fatalf("upstream did not get the injected header: %v", hs)
		}
		if strings.Contains(out, e2eSecret) {
			t.Fatal("the echoed secret reached the guest")
		}
	})
	t.Run("other domain blocked", func(t *testing.T) {
		code, out := wget("http://" + otherHost + "/")
		blocked(t, code, out)
	})
	t.Run("raw IP of the allowed domain blocked", func(t *testing.T) {
		code, out := wget("http://" + upAllowed.String() + "/")
		blocked(t, code, out)
		code, out = sh(t, c, sbx.ID, "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 20 nc "+upOther.String()+" 80")
		if strings.Contains(out, "server=") || code >= 128 {
			t.Fatalf("raw TCP reached the upstream: exit %d: %s", code, out)
		}
	})
	t.Run("metadata IP blocked", func(t *testing.T) {
		code, out := wget("http://169.254.169.254/latest/meta-data/")
		blocked(t, code, out)
	})
	t.Run("host blocked", func(t *testing.T) {
		code, out := wget("http://" + upHostSide.String() + "/")
		blocked(t, code, out)
	})
	t.Run("secret in no env, file or response of the guest", func(t *testing.T) {
		// The needle is assembled in a shell variable (not exported), so
		// the search does not plant it where it looks.
		half := len(e2eSecret) / 2
		script := fmt.Sprintf(`a='%s'; b='%s'; n="$a$b"; `+
			`grep -l -F "$n" /proc/[0-9]*/environ 2>/dev/null; grep -r -l -F "$n" /etc /root /tmp 2>/dev/null; `+
			`test -s /tmp/resp.txt && echo resp-present`, e2eSecret[:half], e2eSecret[half:])
		_, out := sh(t, c, sbx.ID, script)
		if strings.TrimSpace(out) != "resp-present" {
			t.Fatalf("secret found in the guest (or no response kept): %q", out)
		}
	})
	t.Run("policy change applies at once", func(t *testing.T) {
		var got apiv1.Sandbox
		c.mustDo("PUT", "/v1/sandboxes/"+sbx.ID+"/network", map[string]any{
			"egress": map[string]any{"allow": []string{otherHost}},
			"inject": []map[string]string{{"domain": allowedHost, "header": "X-Api-Key", "value": "Bearer ${secret:e2e-token}"}},
		}, &got, 200)
		code, out := wget("http://" + otherHost + "/")
		if code != 0 || !strings.Contains(out, "server=other") {
			t.Fatalf("newly allowed domain: exit %d: %s", code, out)
		}
		for _, h := range u.headers("other") {
			if h.Get("X-Api-Key") != "" {
				t.Fatalf("the credential went to a domain without an inject rule: %v", h)
			}
		}
		code, out = wget("http://" + allowedHost + "/")
		blocked(t, code, out)
	})
	t.Run("network log", func(t *testing.T) {
		var lg apiv1.NetworkLog
		c.mustDo("GET", "/v1/sandboxes/"+sbx.ID+"/network/log", nil, &lg, 200)
		var allowed, denied, injected bool
		for _, r := range lg.Records {
			allowed = allowed || (r.Allowed && strings.HasPrefix(r.Destination, allowedHost))
			denied = denied || !r.Allowed
			injected = injected || (len(r.Injected) > 0 && r.Injected[0] == "X-Api-Key")
		}
		if !allowed || !denied || !injected {
			t.Fatalf("log lacks allowed=%v denied=%v injected=%v: %+v", allowed, denied, injected, lg.Records)
		}
		resp := c.request("GET", "/v1/sandboxes/"+sbx.ID+"/network/log", nil, nil)
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		if strings.Contains(buf.String(), e2eSecret) {
			t.Fatal("the network log holds the secret")
		}
	})
	t.Run("spaced log holds no secret", func(t *testing.T) {
		b, _ := os.ReadFile(srv.log.Name())
		if bytes.Contains(b, []byte(e2eSecret)) {
			t.Fatal("spaced logged the secret")
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "sandbox started") {
				t.Log(line)
			}
		}
	})
}
