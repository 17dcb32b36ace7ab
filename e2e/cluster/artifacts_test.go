package cluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// tryExec runs a short shell command in the sandbox through this replica
// and returns its stdout, or an error when it did not exit 0.
func (a *api) tryExec(id, shell string) (string, error) {
	a.t.Helper()
	var out apiv1.ExecResponse
	req := apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{Shell: shell, TimeoutSeconds: 60}}
	if code := a.do("POST", "/v1/sandboxes/"+id+"/exec", req, &out); code != http.StatusOK {
		return "", fmt.Errorf("exec %q in %s: HTTP %d", shell, id, code)
	}
	if out.ExitCode == nil || *out.ExitCode != 0 {
		return out.Stdout, fmt.Errorf("exec %q in %s: exit %v, stderr %q", shell, id, out.ExitCode, out.Stderr)
	}
	return out.Stdout, nil
}

// exec is tryExec that fails the case.
func (a *api) exec(id, shell string) string {
	a.t.Helper()
	out, err := a.tryExec(id, shell)
	if err != nil {
		a.t.Fatal(err)
	}
	return out
}

// startCommand starts a long-running command session: created, then
// started by attaching to its events (the stream is left after the
// "started" event; the command runs on).
func (a *api) startCommand(id, shell string) (commandID string) {
	a.t.Helper()
	var cmd struct {
		Command apiv1.Command `json:"command"`
	}
	if code := a.do("POST", "/v1/sandboxes/"+id+"/commands", apiv1.CreateCommandRequest{Shell: shell}, &cmd); code != http.StatusCreated {
		a.t.Fatalf("create command in %s: HTTP %d", id, code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", a.url+"/v1/sandboxes/"+id+"/commands/"+cmd.Command.ID+"/events", nil)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	resp, err := httpClient.Do(req)
	if err != nil {
		a.t.Fatalf("attach to command %s: %v", cmd.Command.ID, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"started"`) {
			return cmd.Command.ID
		}
	}
	a.t.Fatalf("command %s in %s never started (HTTP %d, %v)", cmd.Command.ID, id, resp.StatusCode, sc.Err())
	return ""
}

// counter reads the background counter of TestBranchOnAnotherWorker.
func (a *api) counter(id string) (int, error) {
	out, err := a.tryExec(id, "cat /tmp/n")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("counter %q: %w", out, errNotYet)
	}
	return n, nil
}

// create asks for a sandbox (body as the API takes it), waits for the
// create and returns the sandbox, which must be running on a worker.
func (a *api) create(body map[string]any) apiv1.Sandbox {
	a.t.Helper()
	var out apiv1.SandboxAndOperation
	if code := a.do("POST", "/v1/sandboxes", body, &out); code != http.StatusAccepted {
		a.t.Fatalf("create %v: HTTP %d", body, code)
	}
	a.t.Cleanup(func() { a.deleteSandbox(out.Sandbox.ID) })
	if op := a.waitOperation(out.Operation.ID, 8*time.Minute); op.State != "succeeded" {
		a.t.Fatalf("create %v: %s %s", body, op.State, errorOf(op))
	}
	sb := a.sandbox(out.Sandbox.ID)
	if sb.State != "running" || sb.Worker == "" {
		a.t.Fatalf("sandbox %s after create: state %s on worker %q", sb.ID, sb.State, sb.Worker)
	}
	return sb
}

// A template built through one control replica (its files in that
// replica's data dir only) is used on every worker: each worker fetches
// the image by digest from the object store. Sandboxes of 2 vCPUs fill a
// 2-vCPU worker each, so three of them run on the three workers.
func TestTemplateUsedOnEveryWorker(t *testing.T) {
	r1, r2 := replica(t, 0), replica(t, 1)
	imports := filepath.Join(cl.Info.Controls[0].DataDir, "imports")
	if err := os.MkdirAll(imports, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(imports, "artifacts-tiny.tar")
	writeRootfsTar(t, src, "etc/artifacts", "built once\n")
	var built apiv1.TemplateAndOperation
	req := apiv1.CreateTemplateRequest{Name: "artifacts-tiny", Source: apiv1.TemplateSource{Type: "rootfs", Path: src},
		Defaults: &apiv1.TemplateDefaults{VCPUs: 2, MemoryMiB: 256}}
	if code := r1.do("POST", "/v1/templates", req, &built); code != http.StatusAccepted {
		t.Fatalf("build template: HTTP %d", code)
	}
	t.Cleanup(func() { r1.do("DELETE", "/v1/templates/artifacts-tiny", nil, nil) })
	if op := r1.waitOperation(built.Operation.ID, 12*time.Minute); op.State != "succeeded" {
		t.Fatalf("template build: %s %s", op.State, errorOf(op))
	}
	workers := map[string]bool{}
	for i := range len(cl.Info.Workers) {
		sb := r2.create(map[string]any{"template": "artifacts-tiny", "vcpus": 2, "memory_mib": 256})
		if out := r2.exec(sb.ID, "cat /etc/artifacts"); out != "built once\n" {
			t.Fatalf("sandbox %d (%s on %s) reads %q from the template", i, sb.ID, sb.Worker, out)
		}
		workers[sb.Worker] = true
	}
	if len(workers) != len(cl.Info.Workers) {
		t.Fatalf("sandboxes of the template ran on %v, want all %d workers", workers, len(cl.Info.Workers))
	}
	// Each worker got the build from the object store: it was built on
	// control-1 only.
	for _, w := range cl.Info.Workers {
		log, err := os.ReadFile(w.Log)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(log, []byte("template image fetched from object storage")) ||
			!bytes.Contains(log, []byte("template=artifacts-tiny@"+built.Template.Digest)) {
			t.Errorf("worker %s did not fetch artifacts-tiny@%s from the object store", w.Name, built.Template.Digest)
		}
	}
}

// A branch of a checkpoint starts on another worker than the one that
// took the checkpoint (the parent, 2 vCPUs, fills its 2-vCPU worker),
// with the checkpoint's files and its running process.
func TestBranchOnAnotherWorker(t *testing.T) {
	r1, r2 := replica(t, 0), replica(t, 1)
	parent := r1.create(map[string]any{"template": "base", "vcpus": 2, "memory_mib": 256})
	r1.exec(parent.ID, "echo kept > /root/kept")
	// A background counter: in the branch it must run on from where the
	// checkpoint caught it, not start again.
	r1.startCommand(parent.ID, "i=0; while true; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done")
	testenv.Eventually(t, time.Minute, func() error { _, err := r1.counter(parent.ID); return err })
	var ck apiv1.CheckpointAndOperation
	if code := r1.do("POST", "/v1/sandboxes/"+parent.ID+"/checkpoints", map[string]any{"name": "artifacts"}, &ck); code != http.StatusAccepted {
		t.Fatalf("checkpoint: HTTP %d", code)
	}
	if op := r1.waitOperation(ck.Operation.ID, 5*time.Minute); op.State != "succeeded" {
		t.Fatalf("checkpoint: %s %s", op.State, errorOf(op))
	}
	t.Cleanup(func() { r1.do("DELETE", "/v1/checkpoints/"+ck.Checkpoint.ID, nil, nil) })
	atCheckpoint, err := r1.counter(parent.ID)
	if err != nil {
		t.Fatal(err)
	}

	branch := r2.create(map[string]any{"from_checkpoint": ck.Checkpoint.ID})
	if branch.Worker == parent.Worker {
		t.Fatalf("branch %s on %s, the checkpoint's worker: want another", branch.ID, branch.Worker)
	}
	if out := r2.exec(branch.ID, "cat /root/kept"); out != "kept\n" {
		t.Fatalf("branch on %s reads %q from the checkpoint's file", branch.Worker, out)
	}
	first, err := r2.counter(branch.ID)
	if err != nil {
		t.Fatalf("the checkpoint's counter in the branch: %v", err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if n, err := r2.counter(branch.ID); err != nil || n <= first {
			return fmt.Errorf("counter %d (%v), was %d: %w", n, err, first, errNotYet) // it runs on in the branch
		}
		return nil
	})
	if first+50 < atCheckpoint {
		t.Fatalf("branch counter %d, checkpoint near %d: it started again", first, atCheckpoint)
	}
}

// writeRootfsTar writes a rootfs tar holding one file (the build adds the
// agent and a busybox /bin/sh).
func writeRootfsTar(t *testing.T, path, name, body string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: filepath.Dir(name) + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
	tw.Write([]byte(body))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
