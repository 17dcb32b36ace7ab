package placement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// CreateSandbox creates the sandbox's Pod and waits, at most
// ScheduleTimeout, for kube-scheduler to bind it and its worker to report
// it Ready; then it returns what that worker reports. On error the Pod is
// deleted again: nothing is left behind. A Pod no node could take ends
// with ErrResourceExhausted; one bound but not Ready in time with
// ErrDeadlineExceeded; one its worker failed with the worker's error class
// and message.
//
// A Pod lost before its sandbox ran — bound to a node Kubernetes then
// reads NotReady, or evicted or deleted by anyone but SPACE — is placed
// again, up to MaxPlacements in all, kube-scheduler choosing among the
// nodes it was not lost on (k8s.AvoidNodes): a wake racing its old
// worker's death lands on a live one. A branch pinned to its checkpoint's
// node is not placed again.
func (p *Placement) CreateSandbox(ctx context.Context, spec worker.SandboxSpec) (worker.SandboxStatus, error) {
	pin := ""
	if spec.FromCheckpoint != "" {
		var err error
		if spec, pin, err = p.branchOf(ctx, spec); err != nil { // checkpoints.go
			return worker.SandboxStatus{}, err
		}
	}
	p.mu.Lock()
	p.creating[spec.ID] = true
	delete(p.lost, spec.ID)
	delete(p.drainEnds, spec.ID)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.creating, spec.ID)
		p.mu.Unlock()
	}()
	changed, unwatch := p.watch(spec.ID)
	defer unwatch()

	var avoid []string
	for n := 1; ; n++ {
		pod, err := k8s.SandboxPod(spec, k8s.PodOptions{Namespace: p.cfg.Namespace, TolerationSeconds: p.cfg.TolerationSeconds,
			GraceSeconds: p.cfg.DrainGraceSeconds})
		if err != nil {
			return worker.SandboxStatus{}, err
		}
		if pin != "" {
			k8s.PinToNode(pod, pin)
		}
		k8s.AvoidNodes(pod, avoid)
		st, lostOn, err := p.place(ctx, spec, pod, changed)
		if lostOn == nil {
			return st, err
		}
		if pin != "" || n >= MaxPlacements || ctx.Err() != nil {
			return worker.SandboxStatus{}, err
		}
		p.log.Warn("sandbox pod lost before it ran; placing it again", "sandbox", spec.ID, "pod", pod.Name,
			"node", lostOn.Spec.NodeName, "placement", n+1, "err", err)
		// The lost Pod goes first (without grace: its node is dead or it
		// is already being deleted): the next one has its name.
		if derr := p.deletePod(ctx, spec.ID, lostOn.UID); derr != nil {
			return worker.SandboxStatus{}, errors.Join(err, derr)
		}
		if node := lostOn.Spec.NodeName; node != "" && !slices.Contains(avoid, node) {
			avoid = append(avoid, node)
		}
	}
}

// MaxPlacements bounds how many Pods one create or wake makes when each
// is lost before its sandbox runs.
const MaxPlacements = 3

// place creates one Pod for the sandbox and waits for it as CreateSandbox
// says. lost is the Pod when it was lost before the sandbox ran (err says
// how; the caller may place it again and must delete it then); otherwise
// the Pod is Ready, or deleted again on error.
func (p *Placement) place(ctx context.Context, spec worker.SandboxSpec, pod *corev1.Pod, changed <-chan struct{}) (
	st worker.SandboxStatus, lost *corev1.Pod, err error) {
	log := p.log.With("sandbox", spec.ID, "pod", pod.Name)
	made, err := p.client.CoreV1().Pods(p.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return st, nil, errdefs.New(errdefs.ErrConflict, "sandbox %s exists", spec.ID).WithCause(err)
	case err != nil:
		return st, nil, fmt.Errorf("create pod for sandbox %s: %w", spec.ID, classify(err))
	}
	log.Info("sandbox pod created")

	deadline := time.NewTimer(p.cfg.ScheduleTimeout)
	defer deadline.Stop()
	// Node conditions are not Pod events: looked at on a tick.
	nodeTick := time.NewTicker(nodeCheckInterval)
	defer nodeTick.Stop()
	errDeleted := errdefs.New(errdefs.ErrAborted, "the sandbox's Pod was deleted while it was being created")
	for {
		cur, err := p.pods.Pods(p.cfg.Namespace).Get(made.Name)
		switch {
		case apierrors.IsNotFound(err):
			// The informer has not seen it yet, or someone deleted it.
			if seen, gerr := p.client.CoreV1().Pods(p.cfg.Namespace).Get(ctx, made.Name, metav1.GetOptions{}); apierrors.IsNotFound(gerr) {
				return st, p.lostPod(spec.ID, made), errDeleted
			} else if gerr == nil && seen.UID != made.UID {
				return st, nil, errdefs.New(errdefs.ErrAborted, "the sandbox's Pod was replaced while it was being created")
			}
		case err != nil:
			return st, nil, p.abandon(spec.ID, made, err)
		case cur.UID != made.UID:
			return st, nil, p.abandon(spec.ID, made, errDeleted)
		case cur.DeletionTimestamp != nil:
			if l := p.lostPod(spec.ID, cur); l != nil {
				return st, l, errDeleted
			}
			return st, nil, p.abandon(spec.ID, made, errDeleted)
		case k8s.PodReady(cur):
			log.Info("sandbox ready", "node", cur.Spec.NodeName)
			w, err := p.owner(spec.ID)
			if err != nil {
				return st, nil, p.abandon(spec.ID, made, err)
			}
			st, err := w.Sandbox(ctx, spec.ID)
			if err != nil {
				return st, nil, p.abandon(spec.ID, made, err)
			}
			return st, nil, nil
		case cur.Status.Phase == corev1.PodFailed:
			log.Warn("worker failed the sandbox", "node", cur.Spec.NodeName, "reason", cur.Status.Reason, "message", cur.Status.Message)
			return st, nil, p.abandon(spec.ID, made, k8s.PodError(cur))
		case cur.Spec.NodeName != "" && p.nodeLost(cur.Spec.NodeName):
			// Bound to a node Kubernetes reads NotReady (its worker
			// stopped renewing the node's Lease): it will not run there.
			if l := p.lostPod(spec.ID, cur); l != nil {
				return st, l, errdefs.New(errdefs.ErrUnavailable, "the worker chosen for the sandbox was lost before it started it")
			}
		}
		select {
		case <-changed:
		case <-nodeTick.C:
		case <-ctx.Done():
			return st, nil, p.abandon(spec.ID, made, ctx.Err())
		case <-deadline.C:
			return st, nil, p.abandon(spec.ID, made, p.timedOut(spec, made.Name))
		}
	}
}

// nodeCheckInterval is how often a create waiting for its Pod looks at the
// Ready condition of the node it was bound to.
const nodeCheckInterval = time.Second

// lostPod is pod when it went (or is going) without SPACE asking and
// before its sandbox ran, so it may be placed again; nil when SPACE is
// deleting the sandbox.
func (p *Placement) lostPod(id string, pod *corev1.Pod) *corev1.Pod {
	p.mu.Lock()
	_, deleting := p.deleting[id]
	p.mu.Unlock()
	if deleting || k8s.PodReady(pod) || pod.Status.Phase == corev1.PodRunning {
		return nil
	}
	return pod
}

// timedOut is the error of a create whose Pod was not Ready in time.
func (p *Placement) timedOut(spec worker.SandboxSpec, name string) error {
	cur, err := p.pods.Pods(p.cfg.Namespace).Get(name)
	if err == nil && cur.Spec.NodeName != "" {
		return errdefs.New(errdefs.ErrDeadlineExceeded, "the worker did not start the sandbox within %s", p.cfg.ScheduleTimeout)
	}
	why := "no scheduling decision yet"
	if err == nil {
		if msg, ok := k8s.Unschedulable(cur); ok {
			why = msg
		}
	}
	return errdefs.New(errdefs.ErrResourceExhausted,
		"no worker has room for a sandbox of %d vCPUs and %d MiB (waited %s); try a smaller size or later",
		spec.VCPUs, spec.MemoryMiB, p.cfg.ScheduleTimeout).WithCause(errors.New("kube-scheduler: " + why))
}

// abandon deletes a Pod whose create failed (bounded, detached from the
// caller's context) and returns the create's error.
func (p *Placement) abandon(id string, pod *corev1.Pod, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DeleteTimeout+10*time.Second)
	defer cancel()
	p.log.Warn("create failed; deleting its pod", "sandbox", id, "pod", pod.Name, "err", cause)
	if err := p.deletePod(ctx, id, pod.UID); err != nil {
		p.log.Error("delete pod of failed create", "sandbox", id, "pod", pod.Name, "err", err)
	}
	return cause
}

// classify gives an API server error its errdefs class.
func classify(err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%w: %w", errdefs.ErrConflict, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err):
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
}
