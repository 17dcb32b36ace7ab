package placement

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// owner is the worker that owns sandbox id: the one whose node its Pod is
// bound to. ErrNotFound when the sandbox has no Pod; ErrUnavailable when
// it is lost, not placed yet, or its worker cannot be reached.
func (p *Placement) owner(id string) (worker.Worker, error) {
	pod, err := p.pod(id)
	if err != nil {
		return nil, err
	}
	return p.workerOn(pod.Spec.NodeName)
}

// pod is sandbox id's Pod, as the informer has it.
func (p *Placement) pod(id string) (*corev1.Pod, error) {
	p.mu.Lock()
	why, lost := p.lost[id]
	p.mu.Unlock()
	if lost {
		return nil, errdefs.New(errdefs.ErrUnavailable, "%s", why)
	}
	name, err := k8s.PodName(id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	pod, err := p.pods.Pods(p.cfg.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("sandbox %s has no pod: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, classify(err))
	}
	if _, derr, marked := k8s.DrainOutcome(pod); k8s.Suspended(pod) || (marked && derr == nil) {
		return nil, errSuspended(id)
	}
	if why, lost := p.fate(pod); lost {
		return nil, errdefs.New(errdefs.ErrUnavailable, "%s", why)
	}
	if pod.Spec.NodeName == "" {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the sandbox is not placed on a worker yet")
	}
	return pod, nil
}

// fate says whether what Kubernetes shows of a Pod means its sandbox is
// lost, and why in a tenant's words: failed by its worker, bound to a node
// that is not Ready, or being deleted by someone other than this control
// plane (an eviction from a dead node, a kubectl delete).
func (p *Placement) fate(pod *corev1.Pod) (why string, lost bool) {
	if pod.Status.Phase == corev1.PodFailed {
		return k8s.PodError(pod).Error(), true
	}
	if pod.DeletionTimestamp != nil {
		p.mu.Lock()
		_, ours := p.deleting[k8s.SandboxID(pod)]
		p.mu.Unlock()
		if ours {
			return "the sandbox is being deleted", true
		}
		if p.drainDeletion(pod) && !p.nodeLost(pod.Spec.NodeName) {
			return "", false // its worker suspends it (drain.go)
		}
		if _, evicted := k8s.Evicted(pod); evicted || p.nodeLost(pod.Spec.NodeName) {
			return lostWorker, true
		}
		return lostDeleted, true
	}
	if p.nodeLost(pod.Spec.NodeName) {
		return lostWorker, true
	}
	return "", false
}

// workerOn is the client of the worker registered as node name, dialled
// once per address.
func (p *Placement) workerOn(name string) (worker.Worker, error) {
	node, err := p.nodes.Get(name)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the sandbox's worker is not registered").WithCause(fmt.Errorf("node %s: %w", name, err))
	}
	addr, err := k8s.WorkerAddress(node)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the sandbox's worker cannot be reached").WithCause(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("placement is closed: %w", errdefs.ErrUnavailable)
	}
	if w, ok := p.workers[addr]; ok {
		return w, nil
	}
	w, err := p.cfg.Dial(addr)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the sandbox's worker cannot be reached").WithCause(fmt.Errorf("dial %s (node %s): %w", addr, name, err))
	}
	p.workers[addr] = w
	return w, nil
}

// Sandbox reports a sandbox from its worker; a lost one reads VMStopped
// with Lost saying why.
func (p *Placement) Sandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w, err := p.owner(id)
	var pub *errdefs.Public
	if errors.As(err, &pub) && pub.Class == errdefs.ErrUnavailable && p.isLost(id) {
		if p.suspendedInstead(ctx, id) {
			return p.suspended(ctx, id) // suspend.go
		}
		return worker.SandboxStatus{ID: id, State: worker.VMStopped, Lost: pub.Message}, nil
	}
	if errdefs.ClassOf(err) == errdefs.ErrNotFound && p.cfg.Snapshots != nil {
		return p.suspended(ctx, id) // suspend.go
	}
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return w.Sandbox(ctx, id)
}

// isLost reports whether the sandbox is lost: remembered as such, or its
// Pod says so.
func (p *Placement) isLost(id string) bool {
	p.mu.Lock()
	_, lost := p.lost[id]
	p.mu.Unlock()
	if lost {
		return true
	}
	name, err := k8s.PodName(id)
	if err != nil {
		return false
	}
	pod, err := p.pods.Pods(p.cfg.Namespace).Get(name)
	if err != nil {
		return false
	}
	_, lost = p.fate(pod)
	return lost
}

// Sandboxes lists the sandboxes of every sandbox Pod bound to a worker, as
// their workers report them; the lost ones (failed, evicted, on a node
// that is not Ready, deleted from outside) read VMStopped with Lost.
func (p *Placement) Sandboxes(ctx context.Context) ([]worker.SandboxStatus, error) {
	pods, err := p.pods.Pods(p.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []worker.SandboxStatus
	seen := map[string]bool{}
	byNode := map[string]map[string]bool{}
	for _, pod := range pods {
		id := k8s.SandboxID(pod)
		if p.suspendedDeletion(ctx, pod) {
			continue // listed from the object store below
		}
		if why, lost := p.fate(pod); lost {
			out = append(out, worker.SandboxStatus{ID: id, State: worker.VMStopped, Lost: why})
			seen[id] = true
		} else if n := pod.Spec.NodeName; n != "" {
			if byNode[n] == nil {
				byNode[n] = map[string]bool{}
			}
			byNode[n][id] = true
		}
	}
	for node, ids := range byNode {
		w, err := p.workerOn(node)
		if err != nil {
			return nil, err
		}
		vms, err := w.Sandboxes(ctx)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", node, err)
		}
		for _, vm := range vms {
			if ids[vm.ID] {
				out = append(out, vm)
				seen[vm.ID] = true
			}
		}
	}
	p.mu.Lock()
	for id, why := range p.lost {
		if !seen[id] {
			out = append(out, worker.SandboxStatus{ID: id, State: worker.VMStopped, Lost: why})
			seen[id] = true
		}
	}
	p.mu.Unlock()
	for _, n := range byNode {
		for id := range n {
			seen[id] = true // a live Pod wins over a snapshot not deleted yet
		}
	}
	suspended, err := p.suspendedAll(ctx, seen)
	if err != nil {
		return nil, fmt.Errorf("suspended sandboxes: %w", err)
	}
	return append(out, suspended...), nil
}

// readyWorkers are the clients of every Ready worker node.
func (p *Placement) readyWorkers() ([]worker.Worker, error) {
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []worker.Worker
	for _, n := range nodes {
		if !k8s.NodeReady(n) {
			continue
		}
		w, err := p.workerOn(n.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// eachWorker calls fn on every Ready worker and joins their errors.
func (p *Placement) eachWorker(fn func(worker.Worker) error) error {
	ws, err := p.readyWorkers()
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range ws {
		errs = append(errs, fn(w))
	}
	return errors.Join(errs...)
}
