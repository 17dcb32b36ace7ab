package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// The object store's garbage collection, run by the leader replica: every
// --object-store-gc-interval one objstore.Collect pass removes the chunks
// of cut uploads and the objects nobody's record wants any more, once they
// are older than --object-store-gc-grace (the rule for uploads in flight
// is in objstore's package comment). What is wanted is read from the
// store at that moment (objectWanted).

// ObjectGCConfig is when the leader collects the object store's garbage.
type ObjectGCConfig struct {
	// Interval between passes; 0 runs none (the zero value: a config
	// built in code collects nothing unless it says so).
	Interval time.Duration
	// Grace is the age below which nothing is removed.
	Grace time.Duration
}

// Defaults of the flags.
const (
	DefaultObjectGCInterval = 30 * time.Minute
	DefaultObjectGCGrace    = time.Hour
)

// registerObjectGCFlags adds `spaced control`'s GC flags to fs.
func registerObjectGCFlags(fs *flag.FlagSet, c *ObjectGCConfig) {
	fs.DurationVar(&c.Interval, "object-store-gc-interval", DefaultObjectGCInterval,
		"how often the leader removes garbage from --object-store: chunks of cut uploads, objects of deleted sandboxes, checkpoints and templates (0: never)")
	fs.DurationVar(&c.Grace, "object-store-gc-grace", DefaultObjectGCGrace,
		"age below which GC removes nothing: longer than any pause inside an upload, plus the clock skew to the object store")
}

func (c ObjectGCConfig) check() error {
	switch {
	case c.Interval < 0:
		return fmt.Errorf("--object-store-gc-interval must be 0 (off) or positive, not %v", c.Interval)
	case c.Interval > 0 && c.Grace <= 0:
		return fmt.Errorf("--object-store-gc-grace must be positive, not %v: an upload in flight has no manifest yet", c.Grace)
	}
	return nil
}

// objectGCPassTimeout bounds one pass.
const objectGCPassTimeout = 10 * time.Minute

// objectGC is the leader's GC loop, or nil when there is no object store
// or the interval is 0. The loop runs a pass at once and then every
// Interval until ctx (the leadership) ends.
func objectGC(cfg ObjectGCConfig, obj *objstore.Store, db store.Store, log *slog.Logger) func(context.Context) {
	if obj == nil || cfg.Interval <= 0 {
		return nil
	}
	log = log.With("component", "object-gc")
	opts := objstore.GCOptions{Grace: cfg.Grace, Keep: objectWanted(db)}
	return func(ctx context.Context) {
		tick := time.NewTicker(cfg.Interval)
		defer tick.Stop()
		for {
			pctx, cancel := context.WithTimeout(ctx, min(objectGCPassTimeout, cfg.Interval))
			st, err := obj.Collect(pctx, opts)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("object store GC pass stopped", "err", err, "uploads", st.Uploads, "objects", st.Objects)
			case err == nil && (st.Objects > 0 || len(st.Deleted) > 0):
				log.Info("object store GC pass", "uploads", st.Uploads, "objects", st.Objects, "deleted", strings.Join(st.Deleted, ","))
			default:
				log.Debug("object store GC pass: nothing to remove")
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}
}

// objectWanted says whether a complete object is still wanted, from the
// store's records: a suspend snapshot while its sandbox exists and is not
// deleted (a running sandbox's stale one is replaced by its next suspend,
// which may start any moment), a checkpoint while its record exists and
// has not failed, an image while a template record that has not failed
// names its digest. A name SPACE does not make is not GC's to judge: kept.
func objectWanted(db store.Store) func(ctx context.Context, kind, name string) (bool, error) {
	return func(ctx context.Context, kind, name string) (bool, error) {
		switch kind {
		case objstore.KindImage:
			tpls, err := db.ListTemplates(ctx)
			if err != nil {
				return false, err
			}
			for _, t := range tpls {
				if t.Digest == name && t.State != store.TemplateFailed {
					return true, nil
				}
			}
			return false, nil
		case objstore.KindSnapshot:
			if id, ok := strings.CutPrefix(name, worker.SuspendSnapshot("")); ok && id != "" {
				sb, err := db.GetSandbox(ctx, store.AnyTenant, id)
				if errors.Is(err, errdefs.ErrNotFound) {
					return false, nil
				}
				return err == nil && sb.State != store.SandboxDeleted, err
			}
			if id, ok := strings.CutPrefix(name, worker.CheckpointSnapshot("")); ok && id != "" {
				ck, err := db.GetCheckpoint(ctx, store.AnyTenant, id)
				if errors.Is(err, errdefs.ErrNotFound) {
					return false, nil
				}
				return err == nil && ck.State != store.CheckpointFailed, err
			}
		}
		return true, nil
	}
}
