package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	vkerrdefs "github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// podHandler is virtual-kubelet's PodLifecycleHandler (and PodNotifier)
// for a worker: each sandbox Pod bound to the node becomes a sandbox on the
// local worker, adopted when the worker already has it.
type podHandler struct {
	w      worker.Worker
	cfg    Config
	hostIP string
	log    *slog.Logger

	// podClient patches a Pod's drain mark (drain.go); drainSlots bounds
	// the drain suspends running at once.
	podClient  typedcorev1.PodsGetter
	drainSlots chan struct{}

	mu     sync.Mutex
	pods   map[string]*sandboxPod // by namespace/name
	notify func(*corev1.Pod)
	// evicted are the eviction conditions seen on Pods (drain.go).
	evicted map[types.UID]corev1.PodCondition
}

// sandboxPod is what the handler knows of one Pod.
type sandboxPod struct {
	id  string
	pod *corev1.Pod // as Kubernetes gave it, with the status this node reports
	// placeholder: a sandbox the worker had at start whose Pod has not
	// been seen yet (virtual-kubelet deletes it if no Pod is left).
	placeholder bool
	deleting    bool
	// cancel and done belong to a create (or adoption) in flight.
	cancel context.CancelFunc
	done   chan struct{}
}

func newPodHandler(w worker.Worker, cfg Config, hostIP string, pods typedcorev1.PodsGetter) *podHandler {
	return &podHandler{w: w, cfg: cfg, hostIP: hostIP, log: cfg.Logger.With("node", cfg.NodeName), pods: map[string]*sandboxPod{},
		podClient: pods, drainSlots: make(chan struct{}, cfg.DrainConcurrency), evicted: map[types.UID]corev1.PodCondition{}}
}

func key(namespace, name string) string { return namespace + "/" + name }

// loadWorker records the sandboxes the worker has now, before the Pod
// controller starts, so that their Pods are adopted and sandboxes whose
// Pod is gone are deleted (virtual-kubelet's dangling-Pod sweep).
func (h *podHandler) loadWorker(ctx context.Context) error {
	vms, err := h.w.Sandboxes(ctx)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, vm := range vms {
		name, err := k8s.PodName(vm.ID)
		if err != nil {
			h.log.Warn("worker has a sandbox no Pod can name; left alone", "sandbox", vm.ID, "err", err)
			continue
		}
		h.pods[key(h.cfg.Namespace, name)] = &sandboxPod{id: vm.ID, placeholder: true, pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: h.cfg.Namespace, Name: name, Labels: map[string]string{k8s.LabelSandbox: vm.ID}},
		}}
	}
	return nil
}

// CreatePod and UpdatePod make sure the worker runs the Pod's sandbox.
func (h *podHandler) CreatePod(ctx context.Context, pod *corev1.Pod) error { return h.ensure(ctx, pod) }
func (h *podHandler) UpdatePod(ctx context.Context, pod *corev1.Pod) error { return h.ensure(ctx, pod) }

// ensure creates or adopts the Pod's sandbox and reports its status. It
// never returns an error: virtual-kubelet would write the raw error on
// the Pod; a sandbox that cannot be made fails its Pod with a tenant-safe
// message instead.
func (h *podHandler) ensure(ctx context.Context, pod *corev1.Pod) error {
	k := key(pod.Namespace, pod.Name)
	if pod.Namespace != h.cfg.Namespace {
		h.failNew(k, pod, k8s.ReasonInvalidPod, errdefs.New(errdefs.ErrInvalidArgument, "this node runs SPACE sandbox Pods of namespace %s only", h.cfg.Namespace))
		return nil
	}
	spec, err := k8s.SpecFromPod(pod)
	if err != nil {
		h.failNew(k, pod, k8s.ReasonInvalidPod, errdefs.New(errdefs.ErrInvalidArgument, "the Pod carries no sandbox spec this worker can read").WithCause(err))
		return nil
	}
	h.mu.Lock()
	sp := h.pods[k]
	if sp != nil && !sp.placeholder && sp.pod.UID == pod.UID {
		// Known: only labels and annotations may have changed. Posted
		// again, so that virtual-kubelet's next status write (which
		// writes this node's copy of the Pod whole) keeps them.
		sp.pod.Labels, sp.pod.Annotations = pod.Labels, pod.Annotations
		fresh := sp.pod.DeepCopy()
		h.mu.Unlock()
		h.post(fresh)
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CreateTimeout)
	defer cancel()
	sp = &sandboxPod{id: spec.ID, pod: pod.DeepCopy(), cancel: cancel, done: make(chan struct{})}
	sp.pod.Status = pendingStatus(h.hostIP, time.Now())
	started := sp.pod.Status.StartTime
	h.pods[k] = sp
	pending := sp.pod.DeepCopy()
	h.mu.Unlock()
	defer close(sp.done)
	h.post(pending)

	log := h.log.With("sandbox", spec.ID, "pod", k)
	st, err := h.w.Sandbox(cctx, spec.ID)
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		log.Info("creating sandbox")
		st, err = h.w.CreateSandbox(cctx, spec)
		if errdefs.ClassOf(err) == errdefs.ErrConflict { // made meanwhile (a create retried)
			st, err = h.w.Sandbox(cctx, spec.ID)
		}
	} else if err == nil {
		log.Info("adopting sandbox the worker has", "state", st.State)
		if st.State == worker.VMSuspended && spec.FromSnapshot != "" {
			// A wake landed where the suspend's local copy is still kept
			// (its delete had not run): that copy is the same snapshot.
			st, err = h.w.WakeSandbox(cctx, spec.ID)
		}
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// This node is stopping: the next Run adopts or creates it.
		log.Warn("node stopping; sandbox left to the next run", "err", err)
		h.mu.Lock()
		if h.pods[k] == sp {
			delete(h.pods, k)
		}
		h.mu.Unlock()
		return nil
	case err != nil:
		log.Error("sandbox cannot be created", "err", err)
		h.report(k, sp, failedStatus(h.hostIP, k8s.ReasonCreateFailed, err, started, time.Now()))
	case st.State == worker.VMStopped:
		log.Warn("adopted sandbox's VM is gone", "lost", st.Lost)
		h.report(k, sp, failedStatus(h.hostIP, k8s.ReasonVMStopped, vmGone(st, nil), started, time.Now()))
	default:
		h.report(k, sp, runningStatus(h.hostIP, st, started, time.Now()))
	}
	h.mu.Lock()
	sp.cancel = nil
	h.mu.Unlock()
	return nil
}

// failNew records a Pod this node will not run, Failed at once.
func (h *podHandler) failNew(k string, pod *corev1.Pod, reason string, err error) {
	h.log.Warn("refusing Pod", "pod", k, "reason", reason, "err", err)
	sp := &sandboxPod{id: k8s.SandboxID(pod), pod: pod.DeepCopy()}
	h.mu.Lock()
	h.pods[k] = sp
	h.mu.Unlock()
	h.report(k, sp, failedStatus(h.hostIP, reason, err, nil, time.Now()))
}

// report sets a Pod's status, if the Pod is still the one recorded under
// k and not being deleted (DeletePod reports the end), and tells
// virtual-kubelet.
func (h *podHandler) report(k string, sp *sandboxPod, status corev1.PodStatus) {
	h.mu.Lock()
	if h.pods[k] != sp || sp.deleting {
		h.mu.Unlock()
		return
	}
	sp.pod.Status = status
	pod := sp.pod.DeepCopy()
	h.mu.Unlock()
	h.post(pod)
}

func (h *podHandler) post(pod *corev1.Pod) {
	h.mu.Lock()
	notify := h.notify
	h.mu.Unlock()
	if notify != nil {
		pod = pod.DeepCopy()
		h.withDisruption(pod) // drain.go
		notify(pod)
	}
}

// DeletePod deletes the Pod's sandbox on the worker (stopping a create in
// flight first) and reports the Pod terminated. An error is retried by
// virtual-kubelet, and the Pod stays until the sandbox is gone.
func (h *podHandler) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	k := key(pod.Namespace, pod.Name)
	h.mu.Lock()
	sp := h.pods[k]
	var cancel context.CancelFunc
	var done chan struct{}
	if sp != nil {
		sp.deleting = true
		cancel, done = sp.cancel, sp.done
	}
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	id := k8s.SandboxID(pod)
	if sp != nil {
		id = sp.id
	}
	if id != "" && pod.Namespace == h.cfg.Namespace {
		if h.forDrain(pod) {
			// An eviction: suspended to object storage first (drain.go).
			if err := h.drain(ctx, k, sp, pod, id); err != nil {
				return err
			}
		}
		if err := h.w.DeleteSandbox(ctx, id); err != nil {
			h.log.Error("delete sandbox", "sandbox", id, "pod", k, "err", err)
			return err
		}
		h.log.Info("sandbox deleted", "sandbox", id, "pod", k)
	}
	h.mu.Lock()
	final := pod.DeepCopy()
	if sp != nil {
		final.Status = sp.pod.Status
		final.Annotations = sp.pod.Annotations
	}
	final.Status = deletedStatus(final.Status, time.Now())
	if h.pods[k] == sp {
		delete(h.pods, k)
	}
	h.mu.Unlock()
	h.post(final)
	h.mu.Lock()
	delete(h.evicted, pod.UID)
	h.mu.Unlock()
	h.finishDeletion(ctx, pod)
	return nil
}

// finishDeletion removes a Pod whose deletion began once its sandbox is
// gone, as a kubelet does once its containers stopped: virtual-kubelet
// would wait out the Pod's whole grace period (a drain's is long) unless
// a change of the Pod's spec or metadata made it look again.
func (h *podHandler) finishDeletion(ctx context.Context, pod *corev1.Pod) {
	if pod.DeletionTimestamp == nil || pod.UID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, markTimeout)
	defer cancel()
	now := int64(0)
	err := h.podClient.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &now, Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		h.log.Warn("could not finish the Pod's deletion; virtual-kubelet does after its grace period", "pod", key(pod.Namespace, pod.Name), "err", err)
	}
}

// GetPod returns the Pod as this node reports it.
func (h *podHandler) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sp := h.pods[key(namespace, name)]
	if sp == nil {
		return nil, vkerrdefs.NotFoundf("pod %s/%s is not on this node", namespace, name)
	}
	return sp.pod.DeepCopy(), nil
}

// GetPodStatus returns the status this node reports for the Pod.
func (h *podHandler) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := h.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods lists every Pod this node knows, placeholders included.
func (h *podHandler) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(h.pods))
	for _, sp := range h.pods {
		out = append(out, sp.pod.DeepCopy())
	}
	return out, nil
}

// NotifyPods registers virtual-kubelet's status callback.
func (h *podHandler) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	h.mu.Lock()
	h.notify = notify
	h.mu.Unlock()
}
