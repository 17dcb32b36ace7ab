package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/space-sandbox/space/bench/internal/stats"
)

// smallBody is what the port server answers on /.
const smallBody = "portserver\n"

// measure fills every endpoint's series: the downloads, then the small
// GETs, each round going over every endpoint in turn (and a GET on a fresh
// connection then one on the kept-alive one), so drifts in the machine's
// load hit every series alike. The downloads run on the kept-alive client too,
// after one warm-up GET (not counted); its dials are recorded (1 when the
// connection lived through all of it).
func measure(ctx context.Context, cfg config, eps []*endpoint) error {
	for _, ep := range eps {
		ep.download = stats.Series{Name: fmt.Sprintf("download of %s, %s", mib(cfg.bytes), ep.name), Unit: "MiB/s"}
		ep.fresh = stats.Series{Name: "GET / on a fresh connection, " + ep.name, Unit: "ms"}
		ep.kept = stats.Series{Name: "GET / on a kept-alive connection, " + ep.name, Unit: "ms"}
	}
	kept := make([]*via, len(eps))
	for i, ep := range eps {
		kept[i] = newVia(ep, true)
		defer kept[i].hc.CloseIdleConnections()
		if _, err := kept[i].get(ctx, "", time.Minute); err != nil {
			return fmt.Errorf("%s: warm-up: %w", ep.name, err)
		}
	}
	for range cfg.runs {
		for i, ep := range eps {
			start := time.Now()
			n, err := kept[i].get(ctx, fmt.Sprintf("download?bytes=%d", cfg.bytes), 10*time.Minute)
			if err != nil {
				return fmt.Errorf("%s: download: %w", ep.name, err)
			}
			if n != cfg.bytes {
				return fmt.Errorf("%s: download: %d bytes, want %d", ep.name, n, cfg.bytes)
			}
			ep.download.Samples = append(ep.download.Samples, float64(n)/(1<<20)/time.Since(start).Seconds())
		}
	}
	fresh := make([]*via, len(eps))
	for i, ep := range eps {
		fresh[i] = newVia(ep, false)
	}
	for range cfg.requests {
		for i, ep := range eps {
			if err := smallGET(ctx, fresh[i], &ep.fresh); err != nil {
				return err
			}
			if err := smallGET(ctx, kept[i], &ep.kept); err != nil {
				return err
			}
		}
	}
	for i, ep := range eps {
		ep.keptDials = kept[i].dials.Load()
	}
	return nil
}

// smallGET times one GET of / into s.
func smallGET(ctx context.Context, v *via, s *stats.Series) error {
	start := time.Now()
	n, err := v.get(ctx, "", 30*time.Second)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	if n != int64(len(smallBody)) {
		return fmt.Errorf("%s: %d bytes, want %d", s.Name, n, len(smallBody))
	}
	s.AddDuration(time.Since(start))
	return nil
}

// via is an HTTP client of one endpoint's preview URL. It dials the
// endpoint's server whatever the URL's host (a *.localhost preview name
// need not resolve) and counts its dials.
type via struct {
	ep    *endpoint
	hc    *http.Client
	dials atomic.Int64
}

// newVia makes a client that keeps its one connection alive between
// requests, or (keepAlive false) makes a new one for each.
func newVia(ep *endpoint, keepAlive bool) *via {
	v := &via{ep: ep}
	v.hc = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			v.dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, ep.addr)
		},
		DisableKeepAlives:   !keepAlive,
		DisableCompression:  true, // the bytes as the guest sent them
		MaxIdleConnsPerHost: 1,
	}}
	return v
}

// get fetches path (relative to the preview URL) with the URL's token,
// within timeout, wants 200, and returns the body's length.
func (v *via) get(ctx context.Context, path string, timeout time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", v.ep.url+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Space-Port-Token", v.ep.token)
	resp, err := v.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return 0, fmt.Errorf("GET /%s: %s %s", path, resp.Status, b)
	}
	return io.Copy(io.Discard, resp.Body)
}

// mib names a size in MiB, or in bytes below one.
func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20))
}
