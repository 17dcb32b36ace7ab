package devcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Faults for the e2e suite: the cluster's PostgreSQL and SeaweedFS killed
// by the PID the launcher recorded in cluster.json (as a crash would), and
// started again on the same data dir and address, so every control and
// worker keeps its DSN and endpoint and must reconnect by itself.

// serverRecord is the cluster.json entry of server name.
func (c *Cluster) serverRecord(name string) (*ServerInfo, error) {
	for i := range c.Info.Servers {
		if c.Info.Servers[i].Name == name {
			return &c.Info.Servers[i], nil
		}
	}
	return nil, fmt.Errorf("devcluster: no %s in cluster.json", name)
}

// KillPostgres SIGKILLs the store's server, the postmaster by its recorded
// PID and its backends with it, and waits until it has exited.
func (c *Cluster) KillPostgres() error {
	rec, err := c.serverRecord("postgres")
	if err != nil {
		return err
	}
	if rec.PID != c.pg.PID() || !pidAlive(rec.PID) {
		return fmt.Errorf("devcluster: postgres pid %d in cluster.json is not the running server (%d)", rec.PID, c.pg.PID())
	}
	return c.pg.Kill()
}

// RestartPostgres starts the store's server again on its data dir and
// socket (it recovers from its WAL) and records its new PID.
func (c *Cluster) RestartPostgres(ctx context.Context) error {
	if err := c.pg.Restart(ctx); err != nil {
		return err
	}
	rec, err := c.serverRecord("postgres")
	if err != nil {
		return err
	}
	rec.PID = postmasterPID(c.pg.Dir())
	return c.writeInfo()
}

// KillObjectStore SIGKILLs SeaweedFS by its recorded PID and waits until it
// has exited.
func (c *Cluster) KillObjectStore() error {
	rec, err := c.serverRecord("weed")
	if err != nil {
		return err
	}
	if rec.PID != c.s3.PID || !pidAlive(rec.PID) {
		return fmt.Errorf("devcluster: weed pid %d in cluster.json is not the running server (%d)", rec.PID, c.s3.PID)
	}
	return c.s3.Kill()
}

// RestartObjectStore starts SeaweedFS again on its data dir and ports and
// records its new PID.
func (c *Cluster) RestartObjectStore(ctx context.Context) error {
	if err := c.s3.Restart(ctx); err != nil {
		return err
	}
	rec, err := c.serverRecord("weed")
	if err != nil {
		return err
	}
	rec.PID = c.s3.PID
	return c.writeInfo()
}

// WorkerCacheDir is where worker i keeps its object cache: objcache under
// its storage root, the data dir's reflink volume (vol) when it has one.
func (c *Cluster) WorkerCacheDir(i int) string {
	if dir := filepath.Join(c.workers[i].dataDir, "vol", "objcache"); dirExists(dir) {
		return dir
	}
	return filepath.Join(c.workers[i].dataDir, "objcache")
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// RestartWorkerWith restarts worker i as RestartWorker does, with extra
// flags after the ones it was started with (the last value of a flag
// wins); nil extra restarts it with its own flags again.
func (c *Cluster) RestartWorkerWith(ctx context.Context, i int, extra ...string) error {
	p := c.workers[i]
	if p.baseArgs == nil {
		p.baseArgs = p.args
	}
	p.args = append(slices.Clone(p.baseArgs), extra...)
	return c.RestartWorker(ctx, i)
}
