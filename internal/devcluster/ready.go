package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
)

// The cluster is up when a create would succeed: every control replica
// resolves the base template to a ready build (a replica records it only
// once a worker has published it to the object store, so workers can fetch
// it by digest), and a worker node can take a sandbox Pod.

// waitCreatable waits until a create of the base template would succeed.
func (c *Cluster) waitCreatable(ctx context.Context) error {
	if len(c.controls) == 0 {
		return nil // no control replicas: nothing creates
	}
	key, err := os.ReadFile(c.Info.AdminKeyFile)
	if err != nil {
		return err
	}
	for _, p := range c.controls {
		if err := waitBaseTemplate(ctx, p, strings.TrimSpace(string(key))); err != nil {
			return err
		}
	}
	c.progress("the base template is published and ready on every control replica")
	return c.waitSchedulableWorker(ctx)
}

// waitBaseTemplate waits until control p answers GET /v1/templates/base
// with a ready build.
func waitBaseTemplate(ctx context.Context, p *process, key string) error {
	client := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + p.addr + "/v1/templates/base"
	var last string
	for {
		last = baseTemplateState(ctx, client, url, key)
		if last == "ready" {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited; log %s:\n%s", p.name, p.logPath, logTail(p.logPath, 3000))
		case <-ctx.Done():
			return fmt.Errorf("%s: the base template is not ready (%s); log %s:\n%s", p.name, last, p.logPath, logTail(p.logPath, 3000))
		case <-time.After(time.Second):
		}
	}
}

// baseTemplateState is the base template's state as url answers it, or
// what went wrong.
func baseTemplateState(ctx context.Context, client *http.Client, url, key string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var t struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return fmt.Sprintf("undecodable answer: %v", err)
	}
	return t.State
}

// waitSchedulableWorker waits until a worker node is Ready, schedulable
// and not tainted by the node lifecycle controller, with room for a small
// sandbox.
func (c *Cluster) waitSchedulableWorker(ctx context.Context) error {
	var last string
	for {
		nodes, err := c.kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelWorker + "=true"})
		if err == nil {
			last = "no worker node can take a sandbox"
			for i := range nodes.Items {
				if canTakeSandbox(&nodes.Items[i]) {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s", last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func canTakeSandbox(n *corev1.Node) bool {
	if !k8s.NodeReady(n) || n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key != k8s.TaintSandbox && (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) {
			return false
		}
	}
	return n.Status.Allocatable.Cpu().MilliValue() >= 1000 && n.Status.Allocatable.Pods().Value() >= 1
}
