package worker

import "context"

// Drainer is a worker whose sandboxes can be taken off their host by the
// platform under them (a Kubernetes node drain): it reports each such
// move as an Exit with Drain set, and AwaitDrain follows one to its end.
type Drainer interface {
	// AwaitDrain waits, bounded, for the drain of sandbox id to end. It
	// returns the sandbox VMSuspended (its snapshot in object storage, no
	// host) when its worker suspended it; the drain's error (of the class
	// the worker met, in words a tenant may read) when that suspend failed
	// and the sandbox is gone; ErrConflict when the sandbox is not being
	// drained (it runs where it was).
	AwaitDrain(ctx context.Context, id string) (SandboxStatus, error)
	// Draining reports whether sandbox id may be in a drain now: being
	// drained, or gone from its host (a drain may have ended). False when
	// it runs where it was, so a stale notice records nothing.
	Draining(id string) bool
	// WakeAfterDrain says whether a sandbox that was running when its
	// drain began is woken at once (elsewhere, as any wake), or stays
	// suspended until someone wakes it.
	WakeAfterDrain() bool
}
