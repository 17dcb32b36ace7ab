package local

import (
	"context"
	"fmt"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// register adds a new sandbox for spec to the worker's table, holding the
// sandbox's operation lock, and refuses an id the worker already has. The
// caller defers done with the error its create returns: on an error done
// tears the half-made sandbox down (files, network, VM, table entry), and
// in every case it releases the operation lock.
func (w *Worker) register(ctx context.Context, spec worker.SandboxSpec) (sb *sandbox, done func(error), err error) {
	sb = w.newSandbox(spec, w.dir(spec.ID))
	sb.op.Lock() // uncontended: nobody can see sb before it is in the table
	w.mu.Lock()
	if _, dup := w.sandboxes[spec.ID]; dup {
		w.mu.Unlock()
		sb.op.Unlock()
		return nil, nil, fmt.Errorf("sandbox %s exists: %w", spec.ID, errdefs.ErrConflict)
	}
	w.sandboxes[spec.ID] = sb
	w.mu.Unlock()
	done = func(err error) {
		if err != nil {
			w.teardown(context.WithoutCancel(ctx), sb)
		}
		sb.op.Unlock()
	}
	return sb, done, nil
}
