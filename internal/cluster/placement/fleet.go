package placement

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/worker"
)

var _ worker.Fleet = (*Placement)(nil)

// HostOf is the node sandbox id's Pod is bound to, from the informer: ""
// while it has no Pod (suspended), is not bound yet, or is lost (failed,
// being deleted, on a node that is not Ready).
func (p *Placement) HostOf(id string) string {
	pod, err := p.pod(id)
	if err != nil {
		return ""
	}
	return pod.Spec.NodeName
}

// Hosts lists the worker nodes: Ready (and schedulable), their worker
// address, their allocatable vCPUs, memory and sandbox count, and what the
// sandbox Pods bound to them request of it.
func (p *Placement) Hosts(ctx context.Context) ([]worker.HostStatus, error) {
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		return nil, classify(err)
	}
	pods, err := p.pods.Pods(p.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return nil, classify(err)
	}
	allocated := map[string]worker.Resources{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		a := allocated[pod.Spec.NodeName]
		for _, c := range pod.Spec.Containers {
			a.VCPUs += int(c.Resources.Requests.Cpu().Value())
			a.MemoryMiB += mib(c.Resources.Requests.Memory())
		}
		a.Sandboxes++
		allocated[pod.Spec.NodeName] = a
	}
	out := make([]worker.HostStatus, 0, len(nodes))
	for _, n := range nodes {
		addr, _ := k8s.WorkerAddress(n)
		alloc := n.Status.Allocatable
		out = append(out, worker.HostStatus{
			Name: n.Name, Ready: k8s.NodeReady(n) && !n.Spec.Unschedulable, Address: addr,
			Capacity: worker.Resources{VCPUs: int(alloc.Cpu().Value()), MemoryMiB: mib(alloc.Memory()),
				Sandboxes: int(alloc.Pods().Value())},
			Allocated: allocated[n.Name],
			Simulated: n.Labels[k8s.LabelSimulated] == "true",
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func mib(q *resource.Quantity) int { return int(q.Value() >> 20) }
