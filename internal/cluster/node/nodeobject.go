package node

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/worker"
)

// Ready condition reasons on a worker node.
const (
	reasonWorkerReady    = "WorkerReady"
	reasonWorkerNotReady = "WorkerNotReady"
)

// workerVersion is what the node reports as its kubelet version: it runs
// no kubelet, and says so.
const workerVersion = "space-worker"

// newNodeObject is the Node a worker registers: labelled a worker, tainted
// for sandboxes only, with what the worker offers as capacity and
// allocatable and its worker-protocol address.
func newNodeObject(cfg Config, ip string, port int) *corev1.Node {
	offer := corev1.ResourceList{
		corev1.ResourceCPU:    advertisedCPU(cfg.VCPUs, cfg.VCPUOvercommit),
		corev1.ResourceMemory: *resource.NewQuantity(int64(cfg.MemoryMiB)<<20, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(cfg.Sandboxes), resource.DecimalSI),
	}
	labels := map[string]string{
		k8s.LabelWorker:        "true",
		corev1.LabelHostname:   cfg.NodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
	}
	if cfg.Simulated {
		labels[k8s.LabelSimulated] = "true"
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        cfg.NodeName,
			Labels:      labels,
			Annotations: map[string]string{k8s.AnnotationWorkerPort: strconv.Itoa(port)},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: k8s.TaintSandbox, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:    offer,
			Allocatable: offer.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: ip},
				{Type: corev1.NodeHostName, Address: cfg.NodeName},
			},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: runtime.GOARCH, KubeletVersion: workerVersion},
			Phase:    corev1.NodeRunning,
		},
	}
}

// advertisedCPU is the node's cpu capacity: the host's vCPUs times the
// overcommit ratio (none when 0), in millicores, so kube-scheduler places
// that many sandbox vCPUs on it.
func advertisedCPU(vcpus int, overcommit float64) resource.Quantity {
	if overcommit == 0 {
		overcommit = 1
	}
	return *resource.NewMilliQuantity(int64(math.Round(float64(vcpus)*overcommit*1000)), resource.DecimalSI)
}

// readyCondition is the node's Ready condition for what the worker's Ready
// returned.
func readyCondition(err error, now time.Time) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: reasonWorkerReady,
		Message: "the worker can start sandboxes", LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	if err != nil {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, reasonWorkerNotReady, err.Error()
	}
	return c
}

// nodeStatus is virtual-kubelet's NodeProvider for a worker: it asks the
// worker's Ready every ReadyInterval and posts the node with its new
// Ready condition whenever the answer changes.
type nodeStatus struct {
	w   worker.Worker
	cfg Config

	mu   sync.Mutex
	node *corev1.Node // what is posted: the registered node with the last Ready condition
	last string       // the last Ready answer ("" when ready)
}

func newNodeStatus(ctx context.Context, w worker.Worker, cfg Config, node *corev1.Node) *nodeStatus {
	s := &nodeStatus{w: w, cfg: cfg, node: node}
	s.update(ctx) // the node registers with the worker's answer of now
	return s
}

// Ping is virtual-kubelet's liveness check, which gates the Lease renewal:
// the worker runs in this process, so this process renewing the Lease is
// the heartbeat; whether it can start sandboxes is the Ready condition.
func (s *nodeStatus) Ping(ctx context.Context) error { return ctx.Err() }

// NotifyNodeStatus watches the worker's readiness until ctx ends.
func (s *nodeStatus) NotifyNodeStatus(ctx context.Context, post func(*corev1.Node)) {
	go func() {
		t := time.NewTicker(s.cfg.ReadyInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if node, changed := s.update(ctx); changed && ctx.Err() == nil {
				s.cfg.Logger.Info("worker readiness changed", "node", s.cfg.NodeName, "ready", node.Status.Conditions[0].Status,
					"message", node.Status.Conditions[0].Message)
				post(node)
			}
		}
	}()
}

// update asks the worker's Ready and returns the node to post and whether
// the answer changed.
func (s *nodeStatus) update(ctx context.Context) (*corev1.Node, bool) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyInterval)
	err := s.w.Ready(ctx)
	cancel()
	answer := ""
	if err != nil {
		answer = err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := answer != s.last || len(s.node.Status.Conditions) == 0
	if changed {
		s.last = answer
		s.node.Status.Conditions = []corev1.NodeCondition{readyCondition(err, time.Now())}
	}
	return s.node.DeepCopy(), changed
}

// current is the node as it should be now (for re-registration).
func (s *nodeStatus) current() *corev1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node.DeepCopy()
}
