package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/space-sandbox/space/bench/internal/apiclient"
	"github.com/space-sandbox/space/bench/internal/stats"
)

// Wake from suspend to first command: the wake call until `true` has run
// through /exec, after a suspend (not timed). On a single node the wake
// restores from the worker's own files; in the cluster the suspend leaves
// the snapshot in object storage only, and the wake's Pod is placed on the
// same worker (every other node cordoned) or on another one (the
// sandbox's own node cordoned), which streams the snapshot down first.

// wakeOnce creates a sandbox of memoryMiB, suspends it, calls place (when
// set) with the node it ran on, and times the wake to the first command.
// The sandbox is deleted after, and place's undo run.
func wakeOnce(ctx context.Context, c *apiclient.Client, memoryMiB int, place func(node string) (undo func(), err error)) (time.Duration, error) {
	id, err := c.CreateFrom(ctx, map[string]any{"template": "base", "vcpus": 1, "memory_mib": memoryMiB}, 10*time.Minute)
	if id != "" {
		defer c.Delete(id)
	}
	if err != nil {
		return 0, err
	}
	var sb struct {
		Worker string `json:"worker"`
	}
	if err := c.Do(ctx, "GET", "/v1/sandboxes/"+id, nil, &sb, 200); err != nil {
		return 0, err
	}
	if err := c.Lifecycle(ctx, id, "suspend", 10*time.Minute); err != nil {
		return 0, err
	}
	if place != nil {
		undo, err := place(sb.Worker)
		if err != nil {
			return 0, err
		}
		defer undo()
	}
	start := time.Now()
	if err := c.Lifecycle(ctx, id, "wake", 10*time.Minute); err != nil {
		return 0, err
	}
	if err := c.ExecTrue(ctx, id); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// cordoner places a wake by cordoning worker nodes.
type cordoner struct {
	kube  kubernetes.Interface
	nodes []string
}

// sameWorker cordons every node but the sandbox's own.
func (k cordoner) sameWorker(node string) (func(), error) {
	var others []string
	for _, n := range k.nodes {
		if n != node {
			others = append(others, n)
		}
	}
	return k.cordon(others)
}

// otherWorker cordons the sandbox's own node.
func (k cordoner) otherWorker(node string) (func(), error) { return k.cordon([]string{node}) }

func (k cordoner) cordon(nodes []string) (func(), error) {
	set := func(names []string, unschedulable bool) error {
		patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, unschedulable)
		for _, n := range names {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := k.kube.CoreV1().Nodes().Patch(ctx, n, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			cancel()
			if err != nil {
				return fmt.Errorf("cordon %s=%t: %w", n, unschedulable, err)
			}
		}
		return nil
	}
	undo := func() { _ = set(nodes, false) }
	if err := set(nodes, true); err != nil {
		undo()
		return nil, err
	}
	return undo, nil
}

// wakeSeries measures runs wakes of each size on the single node and on
// the same and another worker of the cluster.
func wakeSeries(ctx context.Context, single, control *apiclient.Client, k cordoner, runs int) ([]stats.Series, error) {
	var out []stats.Series
	for _, mib := range []int{256, 1024} {
		setups := []struct {
			name  string
			c     *apiclient.Client
			place func(string) (func(), error)
		}{
			{"single node", single, nil},
			{"cluster, same worker", control, k.sameWorker},
			{"cluster, another worker", control, k.otherWorker},
		}
		series := make([]stats.Series, len(setups))
		for i, s := range setups {
			series[i] = stats.Series{Name: fmt.Sprintf("wake from suspend to first command, %s (%d MiB)", s.name, mib), Unit: "ms"}
		}
		for range runs { // interleaved, so load drifts hit all three alike
			for i, s := range setups {
				d, err := wakeOnce(ctx, s.c, mib, s.place)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", series[i].Name, err)
				}
				series[i].AddDuration(d)
			}
		}
		out = append(out, series...)
	}
	return out, nil
}
