package placement

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// What a tenant reads when Kubernetes took a sandbox away.
const (
	lostWorker  = "the worker running the sandbox was lost"
	lostDeleted = "the sandbox's Pod was deleted outside SPACE"
)

// watch returns a channel that receives a signal after each change of the
// sandbox's Pod, and the function that stops it.
func (p *Placement) watch(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	p.watchers[id] = append(p.watchers[id], ch)
	p.mu.Unlock()
	return ch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		ws := p.watchers[id]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(p.watchers, id)
		} else {
			p.watchers[id] = ws
		}
	}
}

// signal wakes the watchers of a sandbox (never blocking: a pending
// signal already says "look again").
func (p *Placement) signal(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range p.watchers[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (p *Placement) podAdded(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		p.signal(k8s.SandboxID(pod))
	}
}

func (p *Placement) podUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	pod, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	id := k8s.SandboxID(pod)
	p.noteEviction(pod) // drain.go
	p.signal(id)
	switch {
	case pod.DeletionTimestamp != nil && old.DeletionTimestamp == nil && p.drainDeletion(pod) && !p.nodeLost(pod.Spec.NodeName):
		// Evicted from a live node (a drain): its worker suspends it.
		p.drainStarted(id, pod)
	case pod.Status.Phase == corev1.PodFailed && p.drainDeletion(pod):
		// A drain's suspend failed: its outcome says so (AwaitDrain).
	case pod.DeletionTimestamp != nil && old.DeletionTimestamp == nil:
		// Evicted from a dead node, or deleted by someone else.
		why := lostDeleted
		if _, evicted := k8s.Evicted(pod); evicted || p.nodeLost(pod.Spec.NodeName) {
			why = lostWorker
		}
		p.lose(id, why, pod)
	case pod.Status.Phase == corev1.PodFailed && old.Status.Phase != corev1.PodFailed:
		p.fail(id, pod)
	}
}

func (p *Placement) podDeleted(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pod, ok = tomb.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	id := k8s.SandboxID(pod)
	p.mu.Lock()
	gone, asked := p.deleting[id]
	p.mu.Unlock()
	if asked {
		close(gone)
		p.mu.Lock()
		delete(p.deleting, id)
		p.mu.Unlock()
	} else if p.drainDeletion(pod) {
		p.drainEnded(id, pod) // drain.go
	} else if pod.Status.Phase != corev1.PodFailed {
		// A Failed Pod was reported when it failed.
		p.lose(id, lostDeleted, pod)
	}
	p.signal(id)
}

// nodeLost reports whether a node is gone or not Ready.
func (p *Placement) nodeLost(name string) bool {
	if name == "" {
		return false
	}
	n, err := p.nodes.Get(name)
	return err != nil || !k8s.NodeReady(n)
}

// lose records a sandbox as lost and reports its Exit, once, unless the
// control plane is deleting or still creating it (the call reports then),
// or the Pod goes because the sandbox was suspended to object storage
// (suspend.go; that check asks the store, so it runs off the informer's
// goroutine, bounded).
func (p *Placement) lose(id, why string, pod *corev1.Pod) {
	if k8s.Suspended(pod) {
		return
	}
	if p.cfg.Snapshots != nil && (pod.DeletionTimestamp != nil || wakeNeverRan(pod)) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), storeCheckTimeout)
			defer cancel()
			if p.suspendedDeletion(ctx, pod) {
				p.log.Info("sandbox pod gone after a suspend", "sandbox", id, "pod", pod.Name)
				return
			}
			p.loseNow(id, why, pod)
		}()
		return
	}
	p.loseNow(id, why, pod)
}

// storeCheckTimeout bounds lose's question to the object store.
const storeCheckTimeout = 30 * time.Second

func (p *Placement) loseNow(id, why string, pod *corev1.Pod) {
	p.mu.Lock()
	_, deleting := p.deleting[id]
	_, known := p.lost[id]
	quiet := deleting || known || p.creating[id]
	if !quiet {
		p.lost[id] = why
	}
	p.mu.Unlock()
	if quiet {
		return
	}
	p.log.Warn("sandbox lost", "sandbox", id, "pod", pod.Name, "node", pod.Spec.NodeName, "why", why)
	p.exits.push(worker.Exit{SandboxID: id, Err: errdefs.New(errdefs.ErrUnavailable, "%s", why), Lost: why})
}

// fail reports the Exit of a sandbox whose worker failed its Pod, unless
// the Pod was a wake that never ran: the sandbox stays suspended then (its
// snapshot is the truth; the wake's caller has the error).
func (p *Placement) fail(id string, pod *corev1.Pod) {
	if p.cfg.Snapshots != nil && wakeNeverRan(pod) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), storeCheckTimeout)
			defer cancel()
			if !p.suspendedDeletion(ctx, pod) {
				p.failNow(id, pod)
			}
		}()
		return
	}
	p.failNow(id, pod)
}

func (p *Placement) failNow(id string, pod *corev1.Pod) {
	err := k8s.PodError(pod)
	why := err.Error()
	p.mu.Lock()
	_, deleting := p.deleting[id]
	_, known := p.lost[id]
	quiet := deleting || known || p.creating[id]
	if !quiet {
		p.lost[id] = why
	}
	p.mu.Unlock()
	if quiet {
		return
	}
	p.log.Warn("sandbox failed on its worker", "sandbox", id, "pod", pod.Name, "node", pod.Spec.NodeName, "reason", pod.Status.Reason, "why", why)
	p.exits.push(worker.Exit{SandboxID: id, Err: err, Lost: why})
}

// exitQueue is an unbounded queue in front of the Exits channel, so the
// informer never blocks on a reader that is not there yet.
type exitQueue struct {
	out  chan worker.Exit
	mu   sync.Mutex
	q    []worker.Exit
	more chan struct{}
}

func newExitQueue() *exitQueue {
	return &exitQueue{out: make(chan worker.Exit), more: make(chan struct{}, 1)}
}

func (e *exitQueue) push(ex worker.Exit) {
	e.mu.Lock()
	e.q = append(e.q, ex)
	e.mu.Unlock()
	select {
	case e.more <- struct{}{}:
	default:
	}
}

// pump feeds out until ctx ends, then closes it.
func (e *exitQueue) pump(ctx context.Context) {
	defer close(e.out)
	for {
		e.mu.Lock()
		var next worker.Exit
		pending := len(e.q) > 0
		if pending {
			next = e.q[0]
		}
		e.mu.Unlock()
		if !pending {
			select {
			case <-ctx.Done():
				return
			case <-e.more:
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case e.out <- next:
			e.mu.Lock()
			e.q = e.q[1:]
			e.mu.Unlock()
		}
	}
}
