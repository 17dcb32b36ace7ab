// Command space-cluster runs SPACE's cluster mode on this machine for
// evaluation (`make cluster`, `make cluster-down`): Kubernetes (etcd and
// the control plane), PostgreSQL, SeaweedFS, two `spaced control`
// replicas and three `spaced worker` nodes, through internal/devcluster.
//
//	space-cluster up   [--dir D] [--spaced bin/spaced] [--workers 3] [--controls 127.0.0.1:8080,127.0.0.1:8081]
//	space-cluster down [--dir D]
//
// up starts a launcher in the background (space-cluster serve), which
// holds every process and writes D/cluster.json once all are ready, and
// returns then; down asks it to stop everything and remove what it made,
// and stops what is left by PID when the launcher is gone.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/devcluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: space-cluster up|down [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (up or down)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "space-cluster:", err)
		os.Exit(1)
	}
}

type upFlags struct {
	dir, spaced, controls string
	workers               int
}

func parseUp(name string, args []string) (upFlags, error) {
	var f upFlags
	fs := flag.NewFlagSet("space-cluster "+name, flag.ContinueOnError)
	fs.StringVar(&f.dir, "dir", devcluster.DefaultDir, "state directory (cluster.json, logs, data dirs)")
	fs.StringVar(&f.spaced, "spaced", "bin/spaced", "spaced binary (space-agent beside it)")
	fs.StringVar(&f.controls, "controls", "127.0.0.1:8080,127.0.0.1:8081", "control replicas' listen addresses (comma-separated)")
	fs.IntVar(&f.workers, "workers", 3, "number of workers")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.workers < 1 {
		return f, fmt.Errorf("--workers must be at least 1")
	}
	var err error
	if f.dir, err = filepath.Abs(f.dir); err != nil {
		return f, err
	}
	f.spaced, err = filepath.Abs(f.spaced)
	return f, err
}

// up starts `space-cluster serve` detached and waits for cluster.json to
// say the cluster is ready.
func up(args []string) error {
	f, err := parseUp("up", args)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(f.dir, devcluster.InfoFile)); err == nil {
		return fmt.Errorf("a cluster runs in %s already (make cluster-down stops it)", f.dir)
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(f.dir, "space-cluster.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(self, "serve", "--dir", f.dir, "--spaced", f.spaced, "--controls", f.controls,
		"--workers", fmt.Sprint(f.workers))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives this command and the terminal
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Printf("space-cluster: starting (launcher pid %d, log %s; a first run builds Kubernetes and SeaweedFS: minutes)\n", cmd.Process.Pid, logPath)
	for {
		if info, err := devcluster.ReadInfo(f.dir); err == nil && info.Ready {
			printUsage(info)
			return nil
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("the launcher exited (%v):\n%s", err, b)
		case <-time.After(time.Second):
		}
	}
}

// serve runs the cluster until SIGTERM or SIGINT, then stops it.
func serve(args []string) error {
	f, err := parseUp("serve", args)
	if err != nil {
		return err
	}
	var addrs []string
	for _, a := range strings.Split(f.controls, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	c, err := devcluster.Start(ctx, devcluster.Options{
		Dir: f.dir, Spaced: f.spaced, ControlAddrs: addrs, Workers: f.workers, Progress: os.Stdout,
	})
	if err != nil {
		return err
	}
	fmt.Println("space-cluster: ready")
	<-ctx.Done()
	fmt.Println("space-cluster: stopping")
	return c.Stop()
}

func down(args []string) error {
	fs := flag.NewFlagSet("space-cluster down", flag.ContinueOnError)
	dir := fs.String("dir", devcluster.DefaultDir, "state directory of the cluster")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := devcluster.Down(*dir, os.Stdout); err != nil {
		return err
	}
	fmt.Println("space-cluster: down")
	return nil
}

func printUsage(info devcluster.Info) {
	var urls, workers []string
	for _, c := range info.Controls {
		urls = append(urls, c.URL)
	}
	for _, w := range info.Workers {
		workers = append(workers, w.Name+" ("+w.Address+")")
	}
	fmt.Printf(`space-cluster: up; everything is recorded in %s
  API (any replica):  %s
  admin key:          export SPACE_URL=%s SPACE_API_KEY=$(cat %s)
  workers (nodes):    %s
  Kubernetes:         kubectl --kubeconfig %s get nodes,pods -n %s
  store:              the postgres DSN is in cluster.json
  stop and clean up:  make cluster-down
`, filepath.Join(info.Dir, devcluster.InfoFile), orNone(strings.Join(urls, "  ")), firstOr(urls, "<none>"), info.AdminKeyFile,
		strings.Join(workers, ", "), info.Kubeconfig, info.Namespace)
	if info.Note != "" {
		fmt.Println("  note:              ", info.Note)
	}
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func firstOr(l []string, def string) string {
	if len(l) == 0 {
		return def
	}
	return l[0]
}
