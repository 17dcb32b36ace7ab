package placement

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// A node drain, as the control plane sees it. The Eviction API deletes a
// sandbox Pod (DisruptionTarget, reason k8s.ReasonEvictionByAPI) from a
// live node; its worker suspends the sandbox to object storage, marks the
// Pod with the outcome (k8s.DrainMark) and lets it go. Placement tells
// that apart from a dead node's eviction (the node is not Ready: lost, as
// before) and from a delete from outside (no eviction: lost): it reports
// an Exit with Drain set and no loss, and AwaitDrain follows the drain to
// its end for the operation that records it.

var _ worker.Drainer = (*Placement)(nil)

// What a tenant reads when a drain did not end with the sandbox suspended.
const (
	lostInDrain     = "the worker running the sandbox was lost during a node drain"
	goneInDrain     = "the sandbox's Pod was deleted during a node drain before its worker suspended it"
	drainRecheck    = time.Second // how often AwaitDrain looks at the node's readiness
	defaultDrainFor = 15 * time.Minute
)

// noteEviction remembers the Pods the Eviction API marked: the worker's
// status writes may replace that condition before the deletion comes.
func (p *Placement) noteEviction(pod *corev1.Pod) {
	if c, ok := k8s.DisruptionCondition(pod); ok && c.Status == corev1.ConditionTrue && c.Reason == k8s.ReasonEvictionByAPI {
		p.mu.Lock()
		p.evictedPods[pod.UID] = time.Now()
		p.mu.Unlock()
	}
}

// drainDeletion reports whether the Pod is being deleted by the Eviction
// API (or carries a drain's outcome).
func (p *Placement) drainDeletion(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	if _, _, marked := k8s.DrainOutcome(pod); marked || k8s.EvictedForDrain(pod) {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, seen := p.evictedPods[pod.UID]
	return seen
}

// drainStarted is the eviction of a sandbox Pod from a live node: no loss,
// an Exit with Drain set (unless the control plane is creating or
// deleting the sandbox: that call reports).
func (p *Placement) drainStarted(id string, pod *corev1.Pod) {
	p.mu.Lock()
	_, deleting := p.deleting[id]
	quiet := deleting || p.creating[id]
	delete(p.drainEnds, id)
	p.mu.Unlock()
	if quiet {
		return
	}
	p.log.Info("sandbox pod evicted (node drain): its worker suspends it to object storage", "sandbox", id, "pod", pod.Name, "node", pod.Spec.NodeName)
	p.exits.push(worker.Exit{SandboxID: id, Drain: true})
}

// drainEnded keeps the last state of a drained Pod that is gone, for
// AwaitDrain; a failed drain is remembered as lost with its words.
func (p *Placement) drainEnded(id string, pod *corev1.Pod) {
	_, derr, _ := k8s.DrainOutcome(pod)
	p.mu.Lock()
	p.drainEnds[id] = pod
	delete(p.evictedPods, pod.UID)
	if derr != nil {
		p.lost[id] = k8s.DrainFailed(derr).Error()
	}
	p.mu.Unlock()
	p.log.Info("drained sandbox pod gone", "sandbox", id, "pod", pod.Name, "node", pod.Spec.NodeName, "drain_error", derr)
}

// Draining reports whether sandbox id's Pod is being drained, or gone
// (worker.Drainer).
func (p *Placement) Draining(id string) bool {
	pod := p.podInCache(id)
	return pod == nil || p.drainDeletion(pod)
}

// WakeAfterDrain is the drain policy (worker.Drainer).
func (p *Placement) WakeAfterDrain() bool { return !p.cfg.DrainStaysSuspended }

// AwaitDrain waits, at most DrainTimeout, for the drain of sandbox id to
// end (worker.Drainer).
func (p *Placement) AwaitDrain(ctx context.Context, id string) (worker.SandboxStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DrainTimeout)
	defer cancel()
	changed, unwatch := p.watch(id)
	defer unwatch()
	tick := time.NewTicker(drainRecheck)
	defer tick.Stop()
	for {
		st, err, done := p.drainState(ctx, id)
		if done {
			return st, err
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return worker.SandboxStatus{}, errdefs.New(errdefs.ErrDeadlineExceeded, "the node drain did not end in time").WithCause(ctx.Err())
		}
	}
}

// drainState is where the drain of sandbox id is: done with its outcome,
// or not yet.
func (p *Placement) drainState(ctx context.Context, id string) (st worker.SandboxStatus, err error, done bool) {
	pod := p.podInCache(id)
	if pod == nil {
		p.mu.Lock()
		final := p.drainEnds[id]
		delete(p.drainEnds, id)
		p.mu.Unlock()
		st, err := p.drainResult(ctx, id, final)
		return st, err, true
	}
	if _, derr, marked := k8s.DrainOutcome(pod); marked {
		if derr != nil {
			return st, k8s.DrainFailed(derr), true
		}
		return st, nil, false // suspended: its worker drops its copy, then the Pod goes
	}
	if !p.drainDeletion(pod) {
		return st, errdefs.New(errdefs.ErrConflict, "the sandbox is not being drained from its node"), true
	}
	if p.nodeLost(pod.Spec.NodeName) {
		// The node died mid-drain: the snapshot counts if it was stored
		// (manifest last) during this Pod's life.
		if p.suspendedDeletion(ctx, pod) {
			st, err := p.suspended(ctx, id)
			return st, err, true
		}
		return st, errdefs.New(errdefs.ErrUnavailable, "%s", lostInDrain), true
	}
	return st, nil, false
}

// drainResult is the end of a drain whose Pod is gone (final: its last
// state, when this replica saw it go): suspended when its snapshot is in
// the store — made during that Pod's life, when final tells — or the
// drain's error.
func (p *Placement) drainResult(ctx context.Context, id string, final *corev1.Pod) (worker.SandboxStatus, error) {
	if final != nil {
		snap, derr, marked := k8s.DrainOutcome(final)
		switch {
		case marked && derr != nil:
			return worker.SandboxStatus{}, k8s.DrainFailed(derr)
		case !marked && !p.suspendedDeletion(ctx, final):
			return worker.SandboxStatus{}, errdefs.New(errdefs.ErrUnavailable, "%s", goneInDrain)
		case marked && snap != worker.SuspendSnapshot(id):
			return worker.SandboxStatus{}, errdefs.New(errdefs.ErrDataLoss, "the sandbox's saved state is damaged or missing").
				WithCause(errdefs.New(errdefs.ErrInternal, "pod of %s marked drained to %q", id, snap))
		}
	}
	st, err := p.suspended(ctx, id)
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		return st, errdefs.New(errdefs.ErrUnavailable, "%s", goneInDrain).WithCause(err)
	}
	return st, err
}
