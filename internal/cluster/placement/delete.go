package placement

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
)

// deleteGraceSeconds is a sandbox Pod's grace period: its worker deletes
// the sandbox as soon as it sees the deletion, then virtual-kubelet removes
// the Pod after this.
const deleteGraceSeconds = 1

// DeleteSandbox deletes the sandbox's Pod and waits, at most
// DeleteTimeout, for it to be gone, which its worker allows once it has
// deleted the sandbox. A Pod whose node is not Ready, or still waiting
// there after DeleteTimeout, is deleted without grace: its worker deletes
// the sandbox when it comes back (a VM with no Pod). Its suspend snapshot,
// if any, is deleted from the object store. Idempotent.
func (p *Placement) DeleteSandbox(ctx context.Context, id string) error {
	if err := p.deletePod(ctx, id, ""); err != nil {
		return err
	}
	// A suspended sandbox is its snapshot in object storage (suspend.go).
	if err := p.deleteSnapshot(ctx, id); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.lost, id)
	p.mu.Unlock()
	return nil
}

// deletePod deletes sandbox id's Pod (only the one with that UID when uid
// is set) and waits for it to be gone.
func (p *Placement) deletePod(ctx context.Context, id string, uid types.UID) error {
	name, err := k8s.PodName(id)
	if err != nil {
		return err
	}
	pods := p.client.CoreV1().Pods(p.cfg.Namespace)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && uid != "" && pod.UID != uid) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: get pod: %w", id, classify(err))
	}
	gone := make(chan struct{})
	p.mu.Lock()
	if ch, ok := p.deleting[id]; ok {
		gone = ch // a delete in flight: wait for the same end
	} else {
		p.deleting[id] = gone
	}
	p.mu.Unlock()

	grace := int64(deleteGraceSeconds)
	if pod.Spec.NodeName == "" || p.nodeLost(pod.Spec.NodeName) || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		grace = 0
	}
	if already, err := p.deleteOnce(ctx, pod, grace); err != nil || already {
		p.forgetDelete(id, gone)
		return err
	}
	timer := time.NewTimer(p.cfg.DeleteTimeout)
	defer timer.Stop()
	select {
	case <-gone:
		return nil
	case <-ctx.Done():
		p.forgetDelete(id, gone)
		return ctx.Err()
	case <-timer.C:
	}
	p.log.Warn("sandbox pod not gone in time; deleting it without grace", "sandbox", id, "pod", name, "node", pod.Spec.NodeName)
	if already, err := p.deleteOnce(ctx, pod, 0); err != nil || already {
		p.forgetDelete(id, gone)
		return err
	}
	timer.Reset(p.cfg.DeleteTimeout)
	select {
	case <-gone:
		return nil
	case <-ctx.Done():
		p.forgetDelete(id, gone)
		return ctx.Err()
	case <-timer.C:
		p.forgetDelete(id, gone)
		return errdefs.New(errdefs.ErrDeadlineExceeded, "the sandbox's Pod was not removed in time").WithCause(fmt.Errorf("pod %s/%s", p.cfg.Namespace, name))
	}
}

// deleteOnce asks the API server to delete the Pod; already is true when
// that Pod was gone before.
func (p *Placement) deleteOnce(ctx context.Context, pod *corev1.Pod, grace int64) (already bool, err error) {
	err = p.client.CoreV1().Pods(p.cfg.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Conflict: the UID precondition failed, so that Pod is gone.
		return true, nil
	}
	return false, fmt.Errorf("sandbox %s: delete pod: %w", k8s.SandboxID(pod), classify(err))
}

// forgetDelete stops treating the sandbox as being deleted, unless a
// later delete took over.
func (p *Placement) forgetDelete(id string, gone chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deleting[id] == gone {
		delete(p.deleting, id)
	}
}
