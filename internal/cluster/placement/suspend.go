package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// SuspendSandbox has the sandbox's worker suspend it, which with an object
// store uploads and verifies its snapshot. Once placement sees that
// snapshot stored, it deletes the Pod — marked k8s.AnnotationSuspended
// first, so that no control replica reads the deletion as a loss — and
// the sandbox is suspended with no worker. Without Snapshots, or when the
// snapshot is not in the store (a worker without one), the sandbox stays
// suspended on its worker with its Pod, and a wake goes back there.
func (p *Placement) SuspendSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	pod, err := p.pod(id)
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		if st, serr := p.suspended(ctx, id); serr == nil {
			return st, nil // suspended already
		}
	}
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	w, err := p.workerOn(pod.Spec.NodeName)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	st, err := w.SuspendSandbox(ctx, id)
	if err != nil || p.cfg.Snapshots == nil {
		return st, err
	}
	if _, _, err := p.storedSpec(ctx, id); err != nil {
		p.log.Warn("suspended sandbox's snapshot is not in the object store; it stays on its worker",
			"sandbox", id, "node", pod.Spec.NodeName, "err", err)
		return st, nil
	}
	if err := p.releasePod(ctx, id, pod); err != nil {
		// Durably suspended all the same: its worker keeps it with the Pod
		// (a wake goes there) until the Pod is deleted.
		p.log.Warn("suspended sandbox's Pod not removed", "sandbox", id, "pod", pod.Name, "err", err)
		return st, nil
	}
	p.log.Info("sandbox suspended to object storage; its pod is gone", "sandbox", id, "node", pod.Spec.NodeName)
	return worker.SandboxStatus{ID: id, State: worker.VMSuspended, Spec: st.Spec, SnapshotBytes: st.SnapshotBytes,
		DiskBytes: st.DiskBytes, MemoryBytes: st.MemoryBytes}, nil
}

// releasePod marks the Pod suspended and deletes it, waiting (bounded) for
// its worker to drop its local copy.
func (p *Placement) releasePod(ctx context.Context, id string, pod *corev1.Pod) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, k8s.AnnotationSuspended)
	if _, err := p.client.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("mark pod suspended: %w", classify(err))
	}
	return p.deletePod(ctx, id, pod.UID)
}

// WakeSandbox wakes a sandbox: one that has a Pod (paused, or suspended on
// its worker) on its worker; one suspended to object storage through a
// new Pod annotated with its snapshot ("suspend/<id>"), which
// kube-scheduler places on any worker that has room, and whose worker
// downloads, verifies and restores it. That wait is bounded like a
// create's: ErrResourceExhausted when no worker has room, the worker's
// error (e.g. ErrDataLoss for a damaged snapshot) when it fails the Pod.
// The snapshot stays until the woken VM runs; its worker deletes it then.
func (p *Placement) WakeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	pod, err := p.pod(id)
	if err != nil && p.suspendedInstead(ctx, id) {
		err = errSuspended(id)
	}
	if err == nil {
		w, err := p.workerOn(pod.Spec.NodeName)
		if err != nil {
			return worker.SandboxStatus{}, err
		}
		return w.WakeSandbox(ctx, id)
	}
	if errdefs.ClassOf(err) != errdefs.ErrNotFound || p.cfg.Snapshots == nil {
		return worker.SandboxStatus{}, err
	}
	spec, _, err := p.storedSpec(ctx, id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	// The Pod of the suspend may still be on its way out.
	if old := p.podInCache(id); old != nil {
		if err := p.deletePod(ctx, id, old.UID); err != nil {
			return worker.SandboxStatus{}, err
		}
	}
	spec.FromSnapshot = worker.SuspendSnapshot(id)
	started := time.Now()
	st, err := p.CreateSandbox(ctx, spec)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	p.log.Info("sandbox woken from object storage", "sandbox", id, "took", time.Since(started).Round(time.Millisecond))
	return st, nil
}

// podInCache is sandbox id's Pod as the informer has it, or nil.
func (p *Placement) podInCache(id string) *corev1.Pod {
	name, err := k8s.PodName(id)
	if err != nil {
		return nil
	}
	pod, err := p.pods.Pods(p.cfg.Namespace).Get(name)
	if err != nil {
		return nil
	}
	return pod
}

// storedSpec is the spec stored with sandbox id's suspend snapshot and
// when that was made. ErrNotFound when it has none.
func (p *Placement) storedSpec(ctx context.Context, id string) (worker.SandboxSpec, time.Time, error) {
	var spec worker.SandboxSpec
	if p.cfg.Snapshots == nil {
		return spec, time.Time{}, fmt.Errorf("sandbox %s has no pod: %w", id, errdefs.ErrNotFound)
	}
	meta, created, err := p.cfg.Snapshots.Meta(ctx, worker.SuspendSnapshot(id))
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		return spec, created, fmt.Errorf("sandbox %s has no pod and no suspend snapshot: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return spec, created, err
	}
	if err := json.Unmarshal(meta, &spec); err != nil || spec.ID != id {
		return spec, created, errdefs.New(errdefs.ErrDataLoss, "the sandbox's saved state is damaged or missing").
			WithCause(fmt.Errorf("suspend snapshot of %s: meta is not its spec (id %q): %v", id, spec.ID, err))
	}
	spec.FromSnapshot, spec.FromCheckpoint = "", ""
	return spec, created, nil
}

// suspendedDeletion reports whether a Pod going away is the end of a
// suspend: marked so (k8s.AnnotationSuspended), or — since
// virtual-kubelet writes its node's copy of a Pod whole and may drop the
// mark — its sandbox has a suspend snapshot made during this Pod's life.
// A snapshot older than the Pod (the one a wake made it from, not deleted
// yet) does not count. It compares the uploading worker's clock with the
// API server's, to the second.
//
// A wake's Pod whose VM never ran (pending, or failed by its worker before
// the sandbox ran) leaves the sandbox suspended as long as its snapshot is
// there: the worker deletes the snapshot only once the woken VM runs.
func (p *Placement) suspendedDeletion(ctx context.Context, pod *corev1.Pod) bool {
	if k8s.Suspended(pod) {
		return true
	}
	if p.cfg.Snapshots == nil {
		return false
	}
	if wakeNeverRan(pod) {
		_, _, err := p.storedSpec(ctx, k8s.SandboxID(pod))
		return err == nil
	}
	if pod.DeletionTimestamp == nil {
		return false
	}
	_, created, err := p.storedSpec(ctx, k8s.SandboxID(pod))
	return err == nil && created.After(pod.CreationTimestamp.Add(time.Second))
}

// wakeNeverRan reports whether pod is a wake whose VM never ran: not
// placed or started yet, or failed by its worker's create.
func wakeNeverRan(pod *corev1.Pod) bool {
	if !k8s.IsWake(pod) {
		return false
	}
	switch pod.Status.Phase {
	case corev1.PodPending, "":
		return true
	case corev1.PodFailed:
		return pod.Status.Reason != k8s.ReasonVMStopped
	}
	return false
}

// suspendedInstead reports whether sandbox id's Pod in the cache is going
// away after a suspend.
func (p *Placement) suspendedInstead(ctx context.Context, id string) bool {
	pod := p.podInCache(id)
	return pod != nil && p.suspendedDeletion(ctx, pod)
}

// suspended is the status of a sandbox suspended to object storage.
func (p *Placement) suspended(ctx context.Context, id string) (worker.SandboxStatus, error) {
	spec, _, err := p.storedSpec(ctx, id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return worker.SandboxStatus{ID: id, State: worker.VMSuspended, Spec: spec}, nil
}

// suspendedAll lists the sandboxes suspended to object storage, skipping
// those in skip (they have a live Pod: a wake whose snapshot is not
// deleted yet).
func (p *Placement) suspendedAll(ctx context.Context, skip map[string]bool) ([]worker.SandboxStatus, error) {
	if p.cfg.Snapshots == nil {
		return nil, nil
	}
	prefix := worker.SuspendSnapshot("")
	names, err := p.cfg.Snapshots.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []worker.SandboxStatus
	for _, name := range names {
		id, ok := strings.CutPrefix(name, prefix)
		if !ok || id == "" || strings.Contains(id, "/") || skip[id] {
			continue
		}
		st, err := p.suspended(ctx, id)
		if errdefs.ClassOf(err) == errdefs.ErrNotFound {
			continue // woken or deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// deleteSnapshot removes a deleted sandbox's suspend snapshot.
func (p *Placement) deleteSnapshot(ctx context.Context, id string) error {
	if p.cfg.Snapshots == nil {
		return nil
	}
	if err := p.cfg.Snapshots.Delete(ctx, worker.SuspendSnapshot(id)); err != nil {
		return fmt.Errorf("sandbox %s: delete its suspend snapshot: %w", id, err)
	}
	return nil
}

// errSuspended is pod's answer for a Pod on its way out after a suspend.
func errSuspended(id string) error {
	return fmt.Errorf("sandbox %s is suspended: %w", id, errdefs.ErrNotFound)
}
