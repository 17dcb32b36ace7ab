// Package workertest is the conformance suite of the worker contract
// (internal/worker): every implementation's tests call Run — the local
// worker with real VMs, the API tests' hand-made worker (api/apitest), the
// simulated worker (worker/sim), and a remote worker's client over them —
// so what the control plane
// relies on is checked against each, and a fake cannot drift from the real
// thing unseen.
//
// It checks the contract's promises that do not depend on how a sandbox is
// made: error classes for unknown ids and wrong states, idempotent delete
// and lifecycle calls, the lifetime of checkpoints and their branches, what
// suspend and wake keep, and the guest calls the API makes. It touches a
// guest only through its files, short processes (echo, true) and port
// calls that connect to nothing, which a worker whose "guest" is a process
// on the host can also run safely.
package workertest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// Harness adapts one implementation to the suite.
type Harness struct {
	// New returns a fresh worker with no sandboxes; the test's cleanup
	// must delete what the suite leaves and close it.
	New func(t *testing.T) worker.Worker
	// Spec is the spec of a sandbox the worker can create, with the id.
	Spec func(id string) worker.SandboxSpec
	// Timeout bounds each call (default 3m: VMs under emulation are slow).
	Timeout time.Duration
}

func (h Harness) ctx(t *testing.T) context.Context {
	d := h.Timeout
	if d == 0 {
		d = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Run runs the suite. Sandboxes share one worker per subtest.
func Run(t *testing.T, h Harness) {
	t.Run("UnknownIsNotFound", func(t *testing.T) { testUnknown(t, h) })
	t.Run("CreateDelete", func(t *testing.T) { testCreateDelete(t, h) })
	t.Run("GuestCalls", func(t *testing.T) { testGuest(t, h) })
	t.Run("PauseSuspendWake", func(t *testing.T) { testLifecycle(t, h) })
	t.Run("Checkpoints", func(t *testing.T) { testCheckpoints(t, h) })
}

func wantClass(t *testing.T, what string, err error, c *errdefs.Class) {
	t.Helper()
	if errdefs.ClassOf(err) != c {
		t.Errorf("%s: %v, want %s", what, err, c)
	}
}

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func wantState(t *testing.T, ctx context.Context, w worker.Worker, id string, state worker.VMState) {
	t.Helper()
	st, err := w.Sandbox(ctx, id)
	if err != nil || st.State != state {
		t.Fatalf("sandbox %s: %q, %v; want %q", id, st.State, err, state)
	}
}

// testUnknown: every call naming an unknown sandbox or checkpoint is
// not_found; deleting one succeeds.
func testUnknown(t *testing.T, h Harness) {
	w, ctx := h.New(t), h.ctx(t)
	const id = "sbx_unknown"
	_, err := w.Sandbox(ctx, id)
	wantClass(t, "Sandbox", err, errdefs.ErrNotFound)
	_, err = w.Agent(ctx, id)
	wantClass(t, "Agent", err, errdefs.ErrNotFound)
	for name, call := range map[string]func(context.Context, string) (worker.SandboxStatus, error){
		"Pause": w.PauseSandbox, "Resume": w.ResumeSandbox, "Suspend": w.SuspendSandbox, "Wake": w.WakeSandbox,
	} {
		_, err := call(ctx, id)
		wantClass(t, name, err, errdefs.ErrNotFound)
	}
	_, err = w.Checkpoint(ctx, id, "ckpt_unknown")
	wantClass(t, "Checkpoint", err, errdefs.ErrNotFound)
	spec := h.Spec("sbx_branch_of_nothing")
	spec.FromCheckpoint = "ckpt_unknown"
	_, err = w.CreateSandbox(ctx, spec)
	wantClass(t, "branch of an unknown checkpoint", err, errdefs.ErrNotFound)
	if err := w.DeleteSandbox(ctx, id); err != nil {
		t.Errorf("DeleteSandbox of an unknown sandbox: %v", err)
	}
	if err := w.DeleteCheckpoint(ctx, "ckpt_unknown"); err != nil {
		t.Errorf("DeleteCheckpoint of an unknown checkpoint: %v", err)
	}
}

// testCreateDelete: a created sandbox runs and is listed; a second create of
// its id is a conflict; delete is idempotent and leaves it unknown.
func testCreateDelete(t *testing.T, h Harness) {
	w, ctx := h.New(t), h.ctx(t)
	id := "sbx_wt_a"
	st := must[worker.SandboxStatus](t, "CreateSandbox")(w.CreateSandbox(ctx, h.Spec(id)))
	if st.ID != id || st.State != worker.VMRunning {
		t.Fatalf("created %+v, want %s running", st, id)
	}
	_, err := w.CreateSandbox(ctx, h.Spec(id))
	wantClass(t, "second create of one id", err, errdefs.ErrConflict)
	list := must[[]worker.SandboxStatus](t, "Sandboxes")(w.Sandboxes(ctx))
	found := false
	for _, s := range list {
		found = found || s.ID == id
	}
	if !found {
		t.Errorf("Sandboxes does not list %s: %+v", id, list)
	}
	for i := range 2 {
		if err := w.DeleteSandbox(ctx, id); err != nil {
			t.Fatalf("DeleteSandbox #%d: %v", i+1, err)
		}
	}
	_, err = w.Sandbox(ctx, id)
	wantClass(t, "Sandbox after delete", err, errdefs.ErrNotFound)
}

// testGuest: the guest calls the API makes, through Agent.
func testGuest(t *testing.T, h Harness) {
	w, ctx := h.New(t), h.ctx(t)
	id := "sbx_wt_g"
	must[worker.SandboxStatus](t, "CreateSandbox")(w.CreateSandbox(ctx, h.Spec(id)))
	g := must[worker.Guest](t, "Agent")(w.Agent(ctx, id))

	if out := run(t, ctx, g, "wt-echo", "echo", "hello"); out != "hello\n" {
		t.Errorf("echo printed %q", out)
	}
	_, err := g.Start(ctx, agentproto.ProcessSpec{ID: "wt-echo", Argv: []string{"true"}})
	wantClass(t, "Start of an id in use", err, errdefs.ErrConflict)
	_, err = g.Get(ctx, "wt-none")
	wantClass(t, "Get of an unknown process", err, errdefs.ErrNotFound)
	procs := must[[]agentproto.ProcessInfo](t, "List")(g.List(ctx))
	if len(procs) == 0 {
		t.Error("List shows no process after one ran")
	}

	data := []byte("conformance\n")
	must[agentproto.FileInfo](t, "WriteFile")(g.WriteFile(ctx, "/tmp/wt/file", 0o600, int64(len(data)), bytes.NewReader(data)))
	if got := readFile(t, ctx, g, "/tmp/wt/file"); !bytes.Equal(got, data) {
		t.Errorf("ReadFile = %q", got)
	}
	if fi := must[agentproto.FileInfo](t, "Stat")(g.Stat(ctx, "/tmp/wt/file")); fi.Size != int64(len(data)) {
		t.Errorf("Stat size %d", fi.Size)
	}
	if ents := must[[]agentproto.FileInfo](t, "ListDir")(g.ListDir(ctx, "/tmp/wt")); len(ents) != 1 || ents[0].Name != "file" {
		t.Errorf("ListDir = %+v", ents)
	}
	tr := must[io.ReadCloser](t, "TarOut")(g.TarOut(ctx, "/tmp/wt"))
	archive, err := io.ReadAll(tr)
	tr.Close()
	if err != nil || len(archive) == 0 {
		t.Fatalf("TarOut: %d bytes, %v", len(archive), err)
	}
	if err := g.TarIn(ctx, "/tmp/wt2", bytes.NewReader(archive)); err != nil {
		t.Fatalf("TarIn: %v", err)
	}
	if got := readFile(t, ctx, g, "/tmp/wt2/file"); !bytes.Equal(got, data) {
		t.Errorf("file through TarOut and TarIn = %q", got)
	}
	if err := g.Delete(ctx, "/tmp/wt2", true); err != nil {
		t.Fatal(err)
	}
	_, err = g.Stat(ctx, "/tmp/wt2")
	wantClass(t, "Stat of a deleted dir", err, errdefs.ErrNotFound)
	_, _, err = g.ReadFile(ctx, "/tmp/wt/none")
	wantClass(t, "ReadFile of a missing file", err, errdefs.ErrNotFound)
	testPorts(t, ctx, g)
	must[struct{}](t, "DeleteSandbox")(struct{}{}, w.DeleteSandbox(ctx, id))
}

// testPorts: the port list is sorted; a port nothing listens on is a
// failed precondition, port 0 an invalid argument.
func testPorts(t *testing.T, ctx context.Context, g worker.Guest) {
	ports := must[[]agentproto.ListeningPort](t, "ListPorts")(g.ListPorts(ctx))
	listening := map[uint16]bool{}
	for i, p := range ports {
		listening[p.Port] = true
		if i > 0 && p.Port < ports[i-1].Port {
			t.Errorf("ListPorts not sorted by port: %+v", ports)
		}
	}
	free := uint16(1)
	for listening[free] {
		free++
	}
	_, err := g.DialPort(ctx, free)
	wantClass(t, "DialPort of a port nothing listens on", err, errdefs.ErrFailedPrecondition)
	_, err = g.DialPort(ctx, 0)
	wantClass(t, "DialPort of port 0", err, errdefs.ErrInvalidArgument)
}

// testLifecycle: pause, suspend and wake move the sandbox through its
// states, are idempotent in their target state, refuse the wrong state as a
// conflict naming it, and keep the guest's files.
func testLifecycle(t *testing.T, h Harness) {
	w, ctx := h.New(t), h.ctx(t)
	id := "sbx_wt_l"
	must[worker.SandboxStatus](t, "CreateSandbox")(w.CreateSandbox(ctx, h.Spec(id)))
	g := must[worker.Guest](t, "Agent")(w.Agent(ctx, id))
	data := []byte("kept across suspend\n")
	must[agentproto.FileInfo](t, "WriteFile")(g.WriteFile(ctx, "/root/kept", 0o600, int64(len(data)), bytes.NewReader(data)))

	for range 2 { // idempotent
		must[worker.SandboxStatus](t, "PauseSandbox")(w.PauseSandbox(ctx, id))
		wantState(t, ctx, w, id, worker.VMPaused)
	}
	must[worker.SandboxStatus](t, "ResumeSandbox")(w.ResumeSandbox(ctx, id))
	wantState(t, ctx, w, id, worker.VMRunning)
	for range 2 {
		must[worker.SandboxStatus](t, "SuspendSandbox")(w.SuspendSandbox(ctx, id))
		wantState(t, ctx, w, id, worker.VMSuspended)
	}
	for name, call := range map[string]func() error{
		"Pause of a suspended sandbox":      func() error { _, err := w.PauseSandbox(ctx, id); return err },
		"Checkpoint of a suspended sandbox": func() error { _, err := w.Checkpoint(ctx, id, "ckpt_wt_susp"); return err },
	} {
		err := call()
		wantClass(t, name, err, errdefs.ErrConflict)
		var pub *errdefs.Public
		if errors.As(err, &pub) && pub.Details["state"] != string(worker.VMSuspended) {
			t.Errorf("%s: details %v, want state %s", name, pub.Details, worker.VMSuspended)
		}
	}
	for range 2 {
		must[worker.SandboxStatus](t, "WakeSandbox")(w.WakeSandbox(ctx, id))
		wantState(t, ctx, w, id, worker.VMRunning)
	}
	g = must[worker.Guest](t, "Agent after wake")(w.Agent(ctx, id))
	if got := readFile(t, ctx, g, "/root/kept"); !bytes.Equal(got, data) {
		t.Errorf("file after suspend and wake = %q", got)
	}
	must[struct{}](t, "DeleteSandbox")(struct{}{}, w.DeleteSandbox(ctx, id))
}

// testCheckpoints: a checkpoint is listed, branches carry its files and
// outlive it, a restore rolls the sandbox back, and deleting it is
// idempotent.
func testCheckpoints(t *testing.T, h Harness) {
	w, ctx := h.New(t), h.ctx(t)
	id, ck := "sbx_wt_c", "ckpt_wt_1"
	must[worker.SandboxStatus](t, "CreateSandbox")(w.CreateSandbox(ctx, h.Spec(id)))
	g := must[worker.Guest](t, "Agent")(w.Agent(ctx, id))
	before := []byte("at the checkpoint\n")
	must[agentproto.FileInfo](t, "WriteFile")(g.WriteFile(ctx, "/root/f", 0o600, int64(len(before)), bytes.NewReader(before)))
	st := must[worker.CheckpointStatus](t, "Checkpoint")(w.Checkpoint(ctx, id, ck))
	if st.ID != ck || st.SandboxID != id {
		t.Errorf("checkpoint %+v", st)
	}
	_, err := w.Checkpoint(ctx, id, ck)
	wantClass(t, "second checkpoint of one id", err, errdefs.ErrConflict)
	wantState(t, ctx, w, id, worker.VMRunning)
	listed := false
	for _, c := range must[[]worker.CheckpointStatus](t, "Checkpoints")(w.Checkpoints(ctx)) {
		listed = listed || c.ID == ck
	}
	if !listed {
		t.Error("Checkpoints does not list the checkpoint")
	}
	after := []byte("after the checkpoint\n")
	must[agentproto.FileInfo](t, "WriteFile")(g.WriteFile(ctx, "/root/f", 0o600, int64(len(after)), bytes.NewReader(after)))

	spec := h.Spec("sbx_wt_branch")
	spec.FromCheckpoint = ck
	must[worker.SandboxStatus](t, "branch")(w.CreateSandbox(ctx, spec))
	gb := must[worker.Guest](t, "Agent of the branch")(w.Agent(ctx, spec.ID))
	if got := readFile(t, ctx, gb, "/root/f"); !bytes.Equal(got, before) {
		t.Errorf("branch's file = %q, want the checkpoint's", got)
	}
	must[worker.SandboxStatus](t, "RestoreCheckpoint")(w.RestoreCheckpoint(ctx, id, ck))
	g = must[worker.Guest](t, "Agent after restore")(w.Agent(ctx, id))
	if got := readFile(t, ctx, g, "/root/f"); !bytes.Equal(got, before) {
		t.Errorf("file after restore = %q, want the checkpoint's", got)
	}
	for range 2 {
		if err := w.DeleteCheckpoint(ctx, ck); err != nil {
			t.Fatalf("DeleteCheckpoint: %v", err)
		}
	}
	if got := readFile(t, ctx, gb, "/root/f"); !bytes.Equal(got, before) {
		t.Errorf("branch's file after its checkpoint went = %q", got)
	}
	again := h.Spec("sbx_wt_branch2")
	again.FromCheckpoint = ck
	_, err = w.CreateSandbox(ctx, again)
	wantClass(t, "branch of a deleted checkpoint", err, errdefs.ErrNotFound)
	for _, s := range []string{id, spec.ID} {
		must[struct{}](t, "DeleteSandbox")(struct{}{}, w.DeleteSandbox(ctx, s))
	}
}

// run runs argv as process pid to its exit and returns its stdout.
func run(t *testing.T, ctx context.Context, g worker.Guest, pid string, argv ...string) string {
	t.Helper()
	if _, err := g.Start(ctx, agentproto.ProcessSpec{ID: pid, Argv: argv}); err != nil {
		t.Fatalf("Start %v: %v", argv, err)
	}
	s, err := g.Events(ctx, pid, 0)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	defer s.Close()
	var out bytes.Buffer
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return out.String()
		}
		if err != nil {
			t.Fatalf("events of %v: %v", argv, err)
		}
		if ev.Type == agentproto.EventStdout {
			out.Write(ev.Data)
		}
	}
}

func readFile(t *testing.T, ctx context.Context, g worker.Guest, path string) []byte {
	t.Helper()
	r, _, err := g.ReadFile(ctx, path)
	if err != nil {
		t.Fatalf("ReadFile %s: %v", path, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("ReadFile %s: %v", path, err)
	}
	return b
}
