package node

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// resync reads the worker's view of every running sandbox Pod back into
// its status every ResyncInterval until ctx ends: level-triggered, so a
// VM that stopped while nobody watched still fails its Pod.
func (h *podHandler) resync(ctx context.Context) {
	t := time.NewTicker(h.cfg.ResyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.resyncOnce(ctx)
	}
}

func (h *podHandler) resyncOnce(ctx context.Context) {
	type item struct {
		k  string
		sp *sandboxPod
		at corev1.PodStatus
	}
	var items []item
	h.mu.Lock()
	for k, sp := range h.pods {
		if !sp.placeholder && !sp.deleting && sp.cancel == nil && sp.pod.Status.Phase == corev1.PodRunning {
			items = append(items, item{k, sp, *sp.pod.Status.DeepCopy()})
		}
	}
	h.mu.Unlock()
	for _, it := range items {
		st, err := h.w.Sandbox(ctx, it.sp.id)
		var next corev1.PodStatus
		switch {
		case errdefs.ClassOf(err) == errdefs.ErrNotFound:
			next = failedStatus(h.hostIP, k8s.ReasonVMStopped, vmGone(worker.SandboxStatus{}, err), it.at.StartTime, time.Now())
		case err != nil:
			if ctx.Err() == nil {
				h.log.Warn("resync: worker did not answer", "sandbox", it.sp.id, "err", err)
			}
			continue
		case st.State == worker.VMStopped:
			next = failedStatus(h.hostIP, k8s.ReasonVMStopped, vmGone(st, nil), it.at.StartTime, time.Now())
		default:
			next = runningStatus(h.hostIP, st, it.at.StartTime, time.Now())
		}
		if next.Phase != it.at.Phase || readyOf(next) != readyOf(it.at) {
			h.log.Info("sandbox status changed", "sandbox", it.sp.id, "phase", next.Phase, "message", next.Message)
			h.report(it.k, it.sp, next)
		}
	}
}

func readyOf(s corev1.PodStatus) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
