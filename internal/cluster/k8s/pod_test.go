package k8s

import (
	"encoding/json"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

func TestSandboxPodRoundTrip(t *testing.T) {
	spec := worker.SandboxSpec{ID: "sbx_01jabc", Template: "python@sha256:ab", VCPUs: 2, MemoryMiB: 512, Hostname: "h",
		Env: map[string]string{"A": "1"}, FromCheckpoint: "ckpt_1", Network: json.RawMessage(`{"allow":["x.dev"]}`), SecretScope: "ten_1"}
	pod, err := SandboxPod(spec, PodOptions{Namespace: "ns", TolerationSeconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "sbx-01jabc" || pod.Namespace != "ns" || pod.Labels[LabelSandbox] != spec.ID || pod.Labels[LabelTenant] != "ten_1" {
		t.Errorf("meta: %s/%s %v", pod.Namespace, pod.Name, pod.Labels)
	}
	if pod.Annotations[AnnotationRestore] != "checkpoint/ckpt_1" || pod.Annotations[AnnotationTemplate] != spec.Template {
		t.Errorf("annotations: %v", pod.Annotations)
	}
	res := pod.Spec.Containers[0].Resources
	wantMem := resource.MustParse("576Mi") // 512 + VMMOverheadMiB
	if res.Requests.Cpu().Value() != 2 || !res.Requests.Memory().Equal(wantMem) || !res.Limits.Memory().Equal(wantMem) {
		t.Errorf("resources: %v", res)
	}
	if pod.Spec.NodeSelector[LabelWorker] != "true" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("selector %v restart %s", pod.Spec.NodeSelector, pod.Spec.RestartPolicy)
	}
	seen := map[string]int64{}
	for _, tol := range pod.Spec.Tolerations {
		if tol.TolerationSeconds != nil {
			seen[tol.Key] = *tol.TolerationSeconds
		} else {
			seen[tol.Key] = -1
		}
	}
	if seen[TaintSandbox] != -1 || seen[corev1.TaintNodeNotReady] != 5 || seen[corev1.TaintNodeUnreachable] != 5 {
		t.Errorf("tolerations: %v", seen)
	}
	back, err := SpecFromPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(spec)
	b, _ := json.Marshal(back)
	if string(a) != string(b) {
		t.Errorf("spec round trip:\n%s\n%s", a, b)
	}
	def, _ := SandboxPod(worker.SandboxSpec{ID: "sbx_x", VCPUs: 1, MemoryMiB: 1}, PodOptions{})
	if got := *def.Spec.Tolerations[1].TolerationSeconds; got != DefaultTolerationSeconds {
		t.Errorf("default toleration %d", got)
	}
}

func TestSandboxPodRefuses(t *testing.T) {
	for name, spec := range map[string]worker.SandboxSpec{
		"no vcpus":    {ID: "sbx_a", MemoryMiB: 1},
		"no memory":   {ID: "sbx_a", VCPUs: 1},
		"upper case":  {ID: "SBX_A", VCPUs: 1, MemoryMiB: 1},
		"slash":       {ID: "sbx/a", VCPUs: 1, MemoryMiB: 1},
		"empty":       {VCPUs: 1, MemoryMiB: 1},
		"bad tenant":  {ID: "sbx_a", VCPUs: 1, MemoryMiB: 1, SecretScope: "ten a"},
		"too long id": {ID: "sbx_" + string(make([]byte, 300)), VCPUs: 1, MemoryMiB: 1},
	} {
		if _, err := SandboxPod(spec, PodOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}

func TestSpecFromPodRefuses(t *testing.T) {
	good, _ := SandboxPod(worker.SandboxSpec{ID: "sbx_a", VCPUs: 1, MemoryMiB: 1}, PodOptions{})
	noSpec := good.DeepCopy()
	delete(noSpec.Annotations, AnnotationSpec)
	badJSON := good.DeepCopy()
	badJSON.Annotations[AnnotationSpec] = "{"
	otherID := good.DeepCopy()
	otherID.Labels[LabelSandbox] = "sbx_b"
	for name, pod := range map[string]*corev1.Pod{"no spec": noSpec, "bad json": badJSON, "other id": otherID} {
		if _, err := SpecFromPod(pod); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}

func TestWorkerAddress(t *testing.T) {
	node := func(port string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{AnnotationWorkerPort: port}},
			Status: corev1.NodeStatus{Addresses: addrs}}
	}
	ip := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}
	host := corev1.NodeAddress{Type: corev1.NodeHostName, Address: "h"}
	v6 := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::1"}
	for _, tc := range []struct {
		node *corev1.Node
		want string
	}{
		{node("7070", host, ip), "10.0.0.7:7070"},
		{node("7070", v6), "[fd00::1]:7070"},
		{node("", ip), ""},
		{node("0", ip), ""},
		{node("x", ip), ""},
		{node("7070", host), ""},
	} {
		got, err := WorkerAddress(tc.node)
		if got != tc.want || (tc.want == "") != (errdefs.ClassOf(err) == errdefs.ErrUnavailable) {
			t.Errorf("%v: %q %v, want %q", tc.node.Status.Addresses, got, err, tc.want)
		}
	}
}

func TestPodError(t *testing.T) {
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if err := PodError(running); err != nil {
		t.Errorf("running pod: %v", err)
	}
	failed := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Message: "m", Conditions: []corev1.PodCondition{
		{Type: ConditionError, Status: corev1.ConditionTrue, Reason: "data_loss", Message: "snapshot damaged"}}}}
	class, msg, _ := errdefs.Render(PodError(failed))
	if class != errdefs.ErrDataLoss || msg != "snapshot damaged" {
		t.Errorf("failed pod: %s %q", class.Code(), msg)
	}
	bare := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Message: "evicted"}}
	class, msg, _ = errdefs.Render(PodError(bare))
	if class != errdefs.ErrUnavailable || msg != "evicted" {
		t.Errorf("bare failed pod: %s %q", class.Code(), msg)
	}
}

func TestNodeName(t *testing.T) {
	if n, err := NodeName("Worker-1"); n != "space-worker-1" || err != nil {
		t.Errorf("NodeName: %q %v", n, err)
	}
	if _, err := NodeName("a_b"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("NodeName(a_b): %v", err)
	}
}
