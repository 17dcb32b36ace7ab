package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-sandbox/space/bench/internal/apiclient"
	"github.com/space-sandbox/space/bench/internal/stats"
)

// bench drives one server's API.
type bench struct {
	cfg      config
	t        target
	c        *apiclient.Client // the admin's, on the first replica
	debugURL string
	run      string // makes this run's idempotency keys its own

	// tenants are the clients' API clients, one per tenant (client i
	// uses tenants[i%len]); b.c, the admin's, when -tenants is 0.
	tenants []*apiclient.Client

	mu   sync.Mutex
	live []liveSandbox // created and running
}

type liveSandbox struct {
	id string
	c  *apiclient.Client // its tenant's
}

// setUp makes -tenants tenants, each with a key.
func (b *bench) setUp(ctx context.Context) error {
	b.tenants = []*apiclient.Client{b.c}
	if b.cfg.tenants == 0 {
		return nil
	}
	b.tenants = nil
	for i := range b.cfg.tenants {
		name := fmt.Sprintf("bench-%d", i)
		if err := b.c.Do(ctx, "POST", "/v1/admin/tenants", map[string]string{"name": name}, nil, 201); err != nil {
			return err
		}
		var k struct{ Key string }
		if err := b.c.Do(ctx, "POST", "/v1/admin/tenants/"+name+"/keys", map[string]string{}, &k, 201); err != nil {
			return err
		}
		b.tenants = append(b.tenants, &apiclient.Client{URL: b.c.URL, Key: k.Key, HTTP: b.c.HTTP})
	}
	return nil
}

func newBench(cfg config, t target) *bench {
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.clients * 2, MaxConnsPerHost: 0}
	return &bench{cfg: cfg, t: t, debugURL: t.debugURL, run: strconv.FormatInt(time.Now().UnixNano(), 36),
		c: &apiclient.Client{URL: t.urls[0], Key: t.key, HTTP: &http.Client{Transport: tr, Timeout: time.Minute}}}
}

// client is client n's: tenant n mod the tenants, on replica n ÷ the
// tenants mod the replicas, so every tenant reaches every replica.
func (b *bench) client(n int) *apiclient.Client {
	c := *b.tenants[n%len(b.tenants)]
	c.URL = b.t.urls[(n/len(b.tenants))%len(b.t.urls)]
	return &c
}

// errTransient is a POST answer worth repeating with the same key: the
// server was busy, failed inside, or is still working on the key.
var errTransient = errors.New("transient")

// postCreate posts one create under key and returns its operation.
func (b *bench) postCreate(ctx context.Context, c *apiclient.Client, key string) (id, op string, err error) {
	req, err := http.NewRequestWithContext(ctx, "POST", c.URL+"/v1/sandboxes", bytes.NewReader([]byte(`{"template":"base"}`)))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.Key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", errTransient, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusAccepted:
	case resp.StatusCode == http.StatusConflict, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return "", "", fmt.Errorf("%w: %d %s", errTransient, resp.StatusCode, body)
	default:
		return "", "", fmt.Errorf("POST /v1/sandboxes: %d %s", resp.StatusCode, body)
	}
	var created struct {
		Sandbox   struct{ ID string }
		Operation struct{ ID string }
	}
	if err := json.Unmarshal(body, &created); err != nil {
		return "", "", err
	}
	return created.Sandbox.ID, created.Operation.ID, nil
}

// create makes sandbox number i to running as c's tenant; it returns how
// many POSTs were repeated.
func (b *bench) create(ctx context.Context, c *apiclient.Client, i int) (retries int, err error) {
	key := fmt.Sprintf("bench-control-%s-%d", b.run, i)
	var id, op string
	for attempt := 0; ; attempt++ {
		id, op, err = b.postCreate(ctx, c, key)
		if !errors.Is(err, errTransient) || attempt == 5 {
			break
		}
		retries++
		select {
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		case <-ctx.Done():
			return retries, ctx.Err()
		}
	}
	if err != nil {
		return retries, err
	}
	if err := c.Wait(ctx, op, b.cfg.createTimeout); err != nil {
		return retries, err
	}
	b.mu.Lock()
	b.live = append(b.live, liveSandbox{id: id, c: c})
	b.mu.Unlock()
	return retries, nil
}

type createStats struct {
	latency         stats.Series
	failed, retries int
	firstErr        error
}

// creates runs the -sandboxes creates over -clients goroutines and
// returns their latencies and the time from the first POST to the last
// sandbox running.
func (b *bench) creates(ctx context.Context) (createStats, time.Duration) {
	s := createStats{latency: stats.Series{Name: fmt.Sprintf("create to running, %d clients", b.cfg.clients), Unit: "ms"}}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	for n := range b.cfg.clients {
		c := b.client(n)
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > b.cfg.sandboxes || ctx.Err() != nil {
					return
				}
				c0 := time.Now()
				retries, err := b.create(ctx, c, i)
				d := time.Since(c0)
				mu.Lock()
				s.retries += retries
				if err != nil {
					s.failed++
					if s.firstErr == nil {
						s.firstErr = err
					}
				} else {
					s.latency.AddDuration(d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return s, time.Since(t0)
}

// reads measures GETs of random live sandboxes and list pages, at once
// over the clients.
func (b *bench) reads(ctx context.Context) (get, list stats.Series) {
	get = stats.Series{Name: fmt.Sprintf("GET /v1/sandboxes/{id}, %d live", len(b.live)), Unit: "ms"}
	list = stats.Series{Name: fmt.Sprintf("GET /v1/sandboxes (page of %d), %d live", b.cfg.pageSize, len(b.live)), Unit: "ms"}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	total := b.cfg.reads + b.cfg.lists
	for range b.cfg.clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > total || ctx.Err() != nil {
					return
				}
				sb := b.live[rand.IntN(len(b.live))]
				series, path := &get, "/v1/sandboxes/"+sb.id
				if (i-1)*b.cfg.lists/total != i*b.cfg.lists/total { // exactly -lists of them, spread evenly
					series, path = &list, "/v1/sandboxes?page_size="+strconv.Itoa(b.cfg.pageSize)
				}
				t0 := time.Now()
				if err := sb.c.Do(ctx, "GET", path, nil, nil, 200); err != nil {
					continue // a failed read counts nowhere; the table's runs say how many succeeded
				}
				d := time.Since(t0)
				mu.Lock()
				series.AddDuration(d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return get, list
}

// rss is the server's resident memory after a forced collection.
func (b *bench) rss(ctx context.Context) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", b.debugURL+"/debug/runtime?gc=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var rt struct {
		RSSBytes uint64 `json:"rss_bytes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rt); err != nil {
		return 0, err
	}
	return rt.RSSBytes, nil
}
