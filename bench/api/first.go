package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/bench/internal/apiclient"
	"github.com/space-sandbox/space/bench/internal/stats"
)

// firstCommand measures create to first command over HTTP, one sandbox at a
// time: POST /v1/sandboxes → GET its operation (?wait) until succeeded →
// POST exec of argv `true` → exit 0. Before each run it deletes the last
// sandbox and waits until the server reports at least wantReady pooled VMs
// (space_pool_ready on /metrics), so every pooled run finds a full pool. One
// create before the runs (not counted) makes the template's ready snapshot.
// It returns the whole measure and its create part.
func firstCommand(ctx context.Context, c *client, label string, runs, wantReady int, timeout time.Duration) (total, create stats.Series, err error) {
	total = stats.Series{Name: "create to first command, " + label, Unit: "ms"}
	create = stats.Series{Name: "  of which create → succeeded, " + label, Unit: "ms"}
	id, err := c.Create(ctx, timeout)
	if id != "" {
		c.Delete(id)
	}
	if err != nil {
		return total, create, fmt.Errorf("warm-up create: %w", err)
	}
	for i := 0; i < runs; i++ {
		if err := c.awaitPool(ctx, wantReady, 2*time.Minute); err != nil {
			return total, create, err
		}
		t0 := time.Now()
		id, err := c.Create(ctx, timeout)
		created := time.Since(t0)
		if err == nil {
			err = c.ExecTrue(ctx, id)
		}
		took := time.Since(t0)
		if id != "" {
			c.Delete(id)
		}
		if err != nil {
			return total, create, fmt.Errorf("run %d: %w", i+1, err)
		}
		total.AddDuration(took)
		create.AddDuration(created)
	}
	return total, create, nil
}

// awaitPool polls /metrics until space_pool_ready is at least want.
func (c *client) awaitPool(ctx context.Context, want int, bound time.Duration) error {
	if want <= 0 {
		return nil
	}
	deadline := time.Now().Add(bound)
	for {
		n, err := c.poolReady(ctx)
		if err != nil {
			return err
		}
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool has %d ready VMs after %s, want %d", n, bound, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// poolReady reads the space_pool_ready gauge.
func (c *client) poolReady(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.URL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Key)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "space_pool_ready "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("GET /metrics: no space_pool_ready (server too old?)")
}

// measureFirst runs firstCommand with pools and without: against two
// servers it starts in turn (--pool-size cfg.poolSize, then 0), or once
// against -url. It returns the series and notes (the ratio of medians).
func measureFirst(ctx context.Context, cfg config) ([]stats.Series, []string, error) {
	newClient := func(url, key string) *client {
		return &client{&apiclient.Client{URL: url, Key: key, HTTP: &http.Client{}}}
	}
	if cfg.url != "" {
		c := newClient(cfg.url, cfg.key)
		n, err := c.poolReady(ctx)
		if err != nil {
			return nil, nil, err
		}
		total, create, err := firstCommand(ctx, c, fmt.Sprintf("server at -url (%d pooled at start)", n), cfg.firstRuns, n, cfg.createTimeout)
		return []stats.Series{total, create}, nil, err
	}
	var out []stats.Series
	var medians []float64
	for _, pool := range []int{cfg.poolSize, 0} {
		label := "no pools (--pool-size 0)"
		if pool > 0 {
			label = fmt.Sprintf("pools (--pool-size %d)", pool)
		}
		stop, url, key, err := apiclient.StartServer(cfg.spaced, "--pool-size", strconv.Itoa(pool))
		if err != nil {
			return nil, nil, err
		}
		total, create, err := firstCommand(ctx, newClient(url, key), label, cfg.firstRuns, pool, cfg.createTimeout)
		stop()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", label, err)
		}
		out = append(out, total, create)
		medians = append(medians, total.Median())
	}
	var notes []string
	if len(medians) == 2 && medians[0] > 0 {
		notes = append(notes, fmt.Sprintf("create to first command: pools are %.2fx faster than no pools (medians %.1f ms vs %.1f ms); each pooled run waited for space_pool_ready >= %d",
			medians[1]/medians[0], medians[0], medians[1], cfg.poolSize))
	}
	notes = append(notes, "cold boot: spaced has no cold-boot switch; see bench/core for it")
	return out, notes, nil
}
