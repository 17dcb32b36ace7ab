package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-sandbox/space/bench/internal/apiclient"
	"github.com/space-sandbox/space/bench/internal/stats"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/devcluster"
)

// endpoint is one way to the server in a sandbox: the address of the API
// server a client connects to and the preview URL it asks for there.
type endpoint struct {
	setup string // "single" or "cluster"
	name  string // its line in the tables
	addr  string // host:port of the spaced (replica) the client dials
	url   string // the private preview URL, ending in /
	token string // its X-Space-Port-Token

	download, fresh, kept stats.Series // the samples measure records
	keptDials             int64        // connections the kept-alive client made
}

// A small sandbox, as bench/cluster creates.
var small = map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256}

// portServer is the guest test server built for this run.
type portServer struct{ dir, path string }

// buildPortServer builds internal/testenv/portserver static (it runs in
// any template) into a temporary directory.
func buildPortServer(ctx context.Context) (portServer, error) {
	root, err := moduleRoot()
	if err != nil {
		return portServer{}, err
	}
	dir, err := os.MkdirTemp("", "space-bench-ports-")
	if err != nil {
		return portServer{}, err
	}
	path := filepath.Join(dir, "portserver")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", path, "./internal/testenv/portserver")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return portServer{}, fmt.Errorf("build portserver: %v\n%s", err, out)
	}
	return portServer{dir: dir, path: path}, nil
}

// moduleRoot walks up from the working directory to SPACE's go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/space-sandbox/space\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside SPACE's source tree (no go.mod of github.com/space-sandbox/space above the working directory)")
		}
		dir = parent
	}
}

// setUpSingle starts a spaced on a temporary data dir and readies a
// sandbox with the port server in it.
func setUpSingle(ctx context.Context, cfg config, server string, progress io.Writer) (*endpoint, func(), error) {
	fmt.Fprintln(progress, "bench/ports: starting the single node")
	stopServer, url, key, err := apiclient.StartServer(cfg.spaced, "--accel", "auto", "--pool-size", "0")
	if err != nil {
		return nil, nil, err
	}
	eps, stopSandbox, err := readySandbox(ctx, cfg, server, "single", []string{url}, key)
	if err != nil {
		stopServer()
		return nil, nil, err
	}
	eps[0].name = "single node"
	return eps[0], func() { stopSandbox(); stopServer() }, nil
}

// setUpCluster starts a devcluster of two control replicas and one worker
// and readies a sandbox with the port server in it, reached through either
// replica.
func setUpCluster(ctx context.Context, cfg config, server string, progress io.Writer) ([]*endpoint, func(), error) {
	dir, err := os.MkdirTemp("", "space-bench-ports-cluster-")
	if err != nil {
		return nil, nil, err
	}
	startCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cl, err := devcluster.Start(startCtx, devcluster.Options{
		Dir: dir, Spaced: cfg.spaced, ControlAddrs: []string{"127.0.0.1:0", "127.0.0.1:0"}, Workers: 1,
		WorkerArgs: []string{"--accel", "auto", "--pool-size", "0"},
		Progress:   progress,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stopCluster := func() { cl.Stop(); os.RemoveAll(dir) }
	key, err := os.ReadFile(cl.Info.AdminKeyFile)
	if err != nil {
		stopCluster()
		return nil, nil, err
	}
	eps, stopSandbox, err := readySandbox(ctx, cfg, server, "cluster", cl.ControlURLs(), strings.TrimSpace(string(key)))
	if err != nil {
		stopCluster()
		return nil, nil, err
	}
	for i, ep := range eps {
		ep.name = fmt.Sprintf("cluster, replica %d", i+1)
	}
	return eps, func() { stopSandbox(); stopCluster() }, nil
}

// readySandbox creates a sandbox through the first of urls, starts the
// port server in it and makes a private preview URL through each of urls
// (the server's own address is the URL's port).
func readySandbox(ctx context.Context, cfg config, server, setup string, urls []string, key string) ([]*endpoint, func(), error) {
	api := &apiclient.Client{URL: urls[0], Key: key, HTTP: &http.Client{Timeout: 2 * time.Minute}}
	id, err := api.CreateFrom(ctx, small, cfg.createTimeout)
	stop := func() {
		if id != "" {
			api.Delete(id)
		}
	}
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("create: %w", err)
	}
	if err := startPortServer(ctx, urls[0], key, id, server, cfg.port); err != nil {
		stop()
		return nil, nil, err
	}
	var eps []*endpoint
	for _, u := range urls {
		c, err := client.New(u, key, &http.Client{Timeout: 2 * time.Minute})
		if err != nil {
			stop()
			return nil, nil, err
		}
		pu, err := c.CreatePortURL(ctx, id, cfg.port, false, 0)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("preview URL through %s: %w", u, err)
		}
		eps = append(eps, &endpoint{setup: setup, addr: strings.TrimPrefix(u, "http://"), url: strings.TrimRight(pu.URL, "/") + "/", token: pu.Token})
	}
	return eps, stop, nil
}

// guestServerPath is where the port server goes in the guest.
const guestServerPath = "/tmp/portserver"

// startPortServer uploads the port server into sandbox id through the
// server at url, starts it as a command listening on 0.0.0.0:port and
// returns once it says it listens (its command runs until the sandbox
// goes).
func startPortServer(ctx context.Context, url, key, id, server string, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err := client.New(url, key, nil) // events stream: no global timeout, ctx bounds it
	if err != nil {
		return err
	}
	f, err := os.Open(server)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := c.PutFile(ctx, id, guestServerPath, 0o755, f); err != nil {
		return fmt.Errorf("upload portserver: %w", err)
	}
	cmd, err := c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Argv: []string{guestServerPath, "-listen", fmt.Sprintf("0.0.0.0:%d", port)}})
	if err != nil {
		return fmt.Errorf("create portserver command: %w", err)
	}
	ev, err := c.Events(ctx, id, cmd.ID, 0)
	if err != nil {
		return fmt.Errorf("start portserver: %w", err)
	}
	defer ev.Close()
	stopClose := context.AfterFunc(ctx, func() { ev.Close() }) // unblocks Next when ctx ends
	defer stopClose()
	var out strings.Builder
	for {
		e, err := ev.Next()
		if err == io.EOF || e.Type == apiv1.EventExit {
			return fmt.Errorf("portserver ended before listening: %q", out.String())
		}
		if err != nil {
			return fmt.Errorf("portserver events: %w (output so far: %q)", err, out.String())
		}
		if e.Data != nil && out.Len() < 64<<10 {
			out.WriteString(*e.Data)
			if strings.Contains(out.String(), "listening ") {
				return nil
			}
		}
	}
}
