package k8s

import (
	"errors"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

func TestWakePodRoundTrip(t *testing.T) {
	spec := worker.SandboxSpec{ID: "sbx_w1", Template: "base", VCPUs: 1, MemoryMiB: 256, FromSnapshot: worker.SuspendSnapshot("sbx_w1")}
	pod, err := SandboxPod(spec, PodOptions{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Annotations[AnnotationRestore]; got != "suspend/sbx_w1" || !IsWake(pod) {
		t.Fatalf("restore annotation %q", got)
	}
	back, err := SpecFromPod(pod)
	if err != nil || back.FromSnapshot != "sandboxes/sbx_w1" {
		t.Fatalf("spec from wake pod: %+v, %v", back, err)
	}

	// The annotation decides: a spec naming another snapshot is refused,
	// and so is one that wakes without the annotation.
	for _, bad := range []worker.SandboxSpec{
		{ID: "sbx_w1", VCPUs: 1, MemoryMiB: 1, FromSnapshot: worker.SuspendSnapshot("sbx_other")},
		{ID: "sbx_w1", VCPUs: 1, MemoryMiB: 1, FromSnapshot: worker.SuspendSnapshot("sbx_w1"), FromCheckpoint: "ckpt_1"},
	} {
		if _, err := SandboxPod(bad, PodOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("SandboxPod(%+v): %v", bad, err)
		}
	}
	plain, _ := SandboxPod(worker.SandboxSpec{ID: "sbx_w1", VCPUs: 1, MemoryMiB: 1}, PodOptions{})
	if IsWake(plain) {
		t.Error("a plain create reads as a wake")
	}
	plain.Annotations[AnnotationSpec] = `{"ID":"sbx_w1","VCPUs":1,"MemoryMiB":1,"FromSnapshot":"sandboxes/sbx_w1"}`
	if _, err := SpecFromPod(plain); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a spec waking without the annotation: %v", err)
	}
	pod.Annotations[AnnotationRestore] = "suspend/sbx_other"
	if _, err := SpecFromPod(pod); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("an annotation naming another sandbox: %v", err)
	}
}
