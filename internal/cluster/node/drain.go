package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// A drain (kubectl drain, or a cordon and the Eviction API) deletes each
// sandbox Pod of the node with a grace period. Before such a Pod goes, its
// sandbox is suspended to object storage — at most DrainConcurrency at
// once on this node, the others waiting their turn with their Pods still
// terminating — and the Pod is marked with the outcome (k8s.DrainMark):
// the snapshot, or why the suspend failed. Then the sandbox's local copy
// is deleted and the Pod goes. A failed suspend still lets the Pod go,
// with the sandbox deleted: nothing is left half-done.

// ReasonDrainFailed is the Pod status reason of a sandbox whose drain
// suspend failed.
const ReasonDrainFailed = "SandboxDrainFailed"

// markTimeout bounds the patch that records a drain's outcome.
const markTimeout = 30 * time.Second

// DrainCounts is what a node's DrainRecord holds.
type DrainCounts struct {
	Active    int // suspending now
	Waiting   int // evicted, waiting for a turn
	Peak      int // most ever suspending at once
	Suspended int // drained to object storage
	Failed    int // drains whose suspend failed
}

// DrainRecord is a node's own account of its drain suspends. The zero
// value is ready; Config.Drains lets its owner read it.
type DrainRecord struct {
	mu sync.Mutex
	c  DrainCounts
}

// Counts returns the record as it is now.
func (r *DrainRecord) Counts() DrainCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

func (r *DrainRecord) update(fn func(c *DrainCounts)) {
	r.mu.Lock()
	fn(&r.c)
	r.c.Peak = max(r.c.Peak, r.c.Active)
	r.mu.Unlock()
}

// forDrain reports whether the Pod's deletion is an eviction through the
// Eviction API: on the Pod, or seen on it earlier (this node's status
// writes may have replaced the condition since).
func (h *podHandler) forDrain(pod *corev1.Pod) bool {
	if k8s.EvictedForDrain(pod) {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, seen := h.evicted[pod.UID]
	return pod.DeletionTimestamp != nil && seen
}

// podSeen records the DisruptionTarget condition of an eviction when the
// Pod informer delivers it, so that the node's next status write keeps it
// (post) and DeletePod knows the deletion for a drain.
func (h *podHandler) podSeen(_, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if c, ok := k8s.DisruptionCondition(pod); ok && c.Reason == k8s.ReasonEvictionByAPI && c.Status == corev1.ConditionTrue {
		h.mu.Lock()
		h.evicted[pod.UID] = c
		h.mu.Unlock()
	}
}

// withDisruption adds the eviction's DisruptionTarget condition to a
// status this node posts, when Kubernetes set one on the Pod.
func (h *podHandler) withDisruption(pod *corev1.Pod) {
	h.mu.Lock()
	c, ok := h.evicted[pod.UID]
	h.mu.Unlock()
	if !ok {
		return
	}
	if _, has := k8s.DisruptionCondition(pod); !has {
		pod.Status.Conditions = append(pod.Status.Conditions, c)
	}
}

// drain suspends sandbox id for the eviction of its Pod and marks the Pod
// with the outcome. It returns an error only when the Pod must stay for a
// retry: ctx ended (the node is stopping; the next run drains it again)
// or the mark could not be written. A failed suspend is an outcome: the
// Pod is marked and reported Failed, and the caller deletes the sandbox.
func (h *podHandler) drain(ctx context.Context, k string, sp *sandboxPod, pod *corev1.Pod, id string) error {
	log := h.log.With("sandbox", id, "pod", k)
	if _, _, marked := k8s.DrainOutcome(pod); marked {
		return nil // marked before a retry: the suspend is done
	}
	rec := h.cfg.Drains
	rec.update(func(c *DrainCounts) { c.Waiting++ })
	select {
	case h.drainSlots <- struct{}{}:
	case <-ctx.Done():
		rec.update(func(c *DrainCounts) { c.Waiting-- })
		return ctx.Err()
	}
	rec.update(func(c *DrainCounts) { c.Waiting--; c.Active++ })
	log.Info("drain: suspending the sandbox to object storage before its Pod goes", "concurrent", rec.Counts().Active)
	started := time.Now()
	serr := h.suspendForDrain(ctx, id)
	// Counted out before the slot is free, so the record never shows
	// more at once than the bound allows.
	rec.update(func(c *DrainCounts) {
		c.Active--
		if serr == nil {
			c.Suspended++
		} else if ctx.Err() == nil {
			c.Failed++
		}
	})
	<-h.drainSlots
	if serr != nil && ctx.Err() != nil {
		log.Warn("drain: node stopping mid-suspend; the next run drains it again", "err", serr)
		return ctx.Err()
	}
	patch, ann := k8s.DrainMark(worker.SuspendSnapshot(id), serr)
	mctx, cancel := context.WithTimeout(ctx, markTimeout)
	defer cancel()
	if _, err := h.podClient.Pods(pod.Namespace).Patch(mctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		log.Error("drain: could not mark the Pod; retried", "err", err)
		return fmt.Errorf("drain of %s: mark pod: %w", id, err)
	}
	h.mu.Lock()
	if sp != nil {
		// virtual-kubelet writes this copy whole: it must carry the mark.
		if sp.pod.Annotations == nil {
			sp.pod.Annotations = map[string]string{}
		}
		for key, v := range ann {
			sp.pod.Annotations[key] = v
		}
		if serr != nil {
			sp.pod.Status = failedStatus(h.hostIP, ReasonDrainFailed, k8s.DrainFailed(serr), sp.pod.Status.StartTime, time.Now())
		}
	}
	h.mu.Unlock()
	if serr != nil {
		log.Error("drain: suspend failed; the sandbox goes with its Pod", "err", serr, "took", time.Since(started).Round(time.Millisecond))
	} else {
		log.Info("drain: sandbox suspended to object storage; its Pod may go", "snapshot", worker.SuspendSnapshot(id),
			"took", time.Since(started).Round(time.Millisecond))
	}
	return nil
}

// suspendForDrain suspends sandbox id to object storage, bounded by
// DrainSuspendTimeout; nil when it is there.
func (h *podHandler) suspendForDrain(ctx context.Context, id string) error {
	if !h.cfg.ObjectStore {
		return errdefs.New(errdefs.ErrFailedPrecondition, "its worker keeps snapshots on its own disk only (no object store), so the sandbox cannot move")
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.DrainSuspendTimeout)
	defer cancel()
	st, err := h.w.Sandbox(ctx, id)
	if err == nil && st.State != worker.VMSuspended && st.State != worker.VMStopped {
		st, err = h.w.SuspendSandbox(ctx, id)
		if errdefs.ClassOf(err) == errdefs.ErrConflict { // suspended meanwhile?
			st, err = h.w.Sandbox(ctx, id)
		}
	}
	switch {
	case errdefs.ClassOf(err) == errdefs.ErrNotFound:
		return vmGone(worker.SandboxStatus{}, err)
	case err != nil:
		return err
	case st.State == worker.VMStopped:
		return vmGone(st, nil)
	case st.State != worker.VMSuspended:
		return errdefs.New(errdefs.ErrUnavailable, "the sandbox's worker did not suspend it").WithCause(fmt.Errorf("state %s", st.State))
	}
	// A worker with an object store suspends there, checked, before its
	// VM stops: a suspended sandbox here is in the store.
	return nil
}
