package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// A preview URL made through one control replica reaches the server in the
// sandbox through either replica: each forwards the connection to the
// sandbox's worker over the worker protocol, so nothing but the control
// plane needs a route to the workers. So do the path form (API key) and a
// public URL.
func TestPortsThroughEachReplica(t *testing.T) {
	r1, r2 := replica(t, 0), replica(t, 1)
	sb := r1.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
	r1.exec(sb.ID, "mkdir -p /root/www && printf 'cluster port\\n' > /root/www/index.html && busybox httpd -p 8080 -h /root/www")
	testenv.Eventually(t, time.Minute, func() error {
		var l apiv1.PortList
		if code := r2.do("GET", "/v1/sandboxes/"+sb.ID+"/ports", nil, &l); code != http.StatusOK {
			return fmt.Errorf("GET ports: HTTP %d", code)
		}
		for _, p := range l.Ports {
			if p.Port == 8080 {
				return nil
			}
		}
		return fmt.Errorf("8080 not listed yet: %+v", l.Ports)
	})
	// A public URL opens the port's preview host to anyone until it
	// expires (private and public URLs of a port are the same host), so the
	// private cases run before it exists.
	var priv, pub apiv1.PortURL
	if code := r1.do("POST", "/v1/sandboxes/"+sb.ID+"/ports/8080/urls", map[string]any{}, &priv); code != http.StatusCreated || priv.Token == "" {
		t.Fatalf("private URL: HTTP %d %+v", code, priv)
	}
	type check struct {
		what, url string
		hdr       map[string]string
		want      int
	}
	run := func(cases func(r *api) []check) {
		t.Helper()
		for i, r := range []*api{r1, r2} {
			for _, tc := range cases(r) {
				status, body := getVia(t, r.url, tc.url, tc.hdr)
				if status != tc.want || (tc.want == 200 && body != "cluster port\n") {
					t.Errorf("replica %d, %s: HTTP %d %q, want %d", i, tc.what, status, body, tc.want)
				}
			}
		}
	}
	run(func(r *api) []check {
		return []check{
			{"private URL with its token", priv.URL, map[string]string{"X-Space-Port-Token": priv.Token}, 200},
			{"private URL without a token", priv.URL, nil, 401},
			{"path form with the API key", r.url + "/v1/sandboxes/" + sb.ID + "/ports/8080/proxy/index.html",
				map[string]string{"Authorization": "Bearer " + r.key}, 200},
		}
	})
	if code := r2.do("POST", "/v1/sandboxes/"+sb.ID+"/ports/8080/urls", map[string]any{"public": true}, &pub); code != http.StatusCreated || pub.Token != "" {
		t.Fatalf("public URL: HTTP %d %+v", code, pub)
	}
	run(func(*api) []check { return []check{{"public URL", pub.URL, nil, 200}} })
}

// getVia GETs target by connecting to the replica at base (whatever
// target's host, which a *.localhost preview name need not resolve to).
func getVia(t *testing.T, base, target string, hdr map[string]string) (int, string) {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest("GET", target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s via %s: %v", target, addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}
