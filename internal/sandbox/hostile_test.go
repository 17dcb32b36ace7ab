package sandbox

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// listingGuest is a guest whose process list is whatever the test says
// (a hostile agent's answer); every other call reaches the real agent.
type listingGuest struct {
	worker.Guest
	list []agentproto.ProcessInfo
}

func (g listingGuest) List(context.Context) ([]agentproto.ProcessInfo, error) { return g.list, nil }

// sourceCommands stores n exited commands of sandbox src, one transaction,
// and returns their process ids in order.
func (d *domain) sourceCommands(src *store.Sandbox, n int) []string {
	d.t.Helper()
	spec, _ := json.Marshal(agentproto.ProcessSpec{Argv: []string{"true"}})
	ids := make([]string, n)
	err := d.store.Atomic(context.Background(), func(ctx context.Context, tx store.Store) error {
		for i := range ids {
			c := &store.Command{ID: store.NewID(store.PrefixCommand), TenantID: d.tenant, SandboxID: src.ID, Spec: spec,
				State: store.CommandRunning, CreatedAt: time.Now().UTC()}
			if err := tx.CreateCommand(ctx, c); err != nil {
				return err
			}
			ids[i] = c.ID
		}
		return nil
	})
	if err != nil {
		d.t.Fatal(err)
	}
	return ids
}

func (d *domain) commandsOf(id string) []*store.Command {
	d.t.Helper()
	cs, err := d.svc.allCommands(context.Background(), id)
	if err != nil {
		d.t.Fatal(err)
	}
	return cs
}

func exitedProcess(id string) agentproto.ProcessInfo {
	code := 0
	return agentproto.ProcessInfo{ID: id, PID: 7, State: agentproto.StateExited, StartedAt: time.Now(),
		Exit: &agentproto.ExitStatus{ExitCode: &code, Reason: agentproto.ReasonExited, EndedAt: time.Now()}, LastSeq: 3}
}

// TestInheritDedupesGuestList: a branch's guest that lists one process id
// thousands of times makes one inherited command, not one per repeat.
func TestInheritDedupesGuestList(t *testing.T) {
	d := newDomain(t)
	src, branch := d.create(), d.create()
	pid := d.sourceCommands(src, 1)[0]
	list := make([]agentproto.ProcessInfo, 3000)
	for i := range list {
		list[i] = exitedProcess(pid)
	}
	d.worker.WrapGuest = func(id string, g worker.Guest) worker.Guest {
		if id != branch.ID {
			return g
		}
		return listingGuest{Guest: g, list: list}
	}
	d.svc.syncCommands(context.Background(), branch.ID, src.ID)
	got := d.commandsOf(branch.ID)
	if len(got) != 1 || got[0].ProcessID != pid {
		t.Fatalf("branch has %d commands after a list repeating %s %d times, want 1", len(got), pid, len(list))
	}
}

// TestInheritBoundsGuestList: past MaxGuestProcesses distinct processes,
// the rest of a guest's list is dropped.
func TestInheritBoundsGuestList(t *testing.T) {
	d := newDomain(t)
	src, branch := d.create(), d.create()
	ids := d.sourceCommands(src, MaxGuestProcesses+10)
	list := make([]agentproto.ProcessInfo, len(ids))
	for i, id := range ids {
		list[i] = exitedProcess(id)
	}
	d.worker.WrapGuest = func(id string, g worker.Guest) worker.Guest {
		if id != branch.ID {
			return g
		}
		return listingGuest{Guest: g, list: list}
	}
	d.svc.syncCommands(context.Background(), branch.ID, src.ID)
	got := d.commandsOf(branch.ID)
	if len(got) != MaxGuestProcesses {
		t.Fatalf("branch has %d commands from a list of %d, want the bound %d", len(got), len(list), MaxGuestProcesses)
	}
	first := map[string]bool{}
	for _, id := range ids[:MaxGuestProcesses] {
		first[id] = true
	}
	for _, c := range got {
		if !first[c.ProcessID] {
			t.Fatalf("inherited %s, which is past the first %d of the guest's list", c.ProcessID, MaxGuestProcesses)
		}
	}
}

// TestGuestExitOutcomes: the exit a guest reports is recorded only when it
// is one a guest may report; host-only reasons, an empty reason and exits
// that do not hold together are recorded "lost", the host's word.
func TestGuestExitOutcomes(t *testing.T) {
	d := newDomain(t)
	ctx := context.Background()
	sb := d.create()
	code := func(n int) *int { return &n }
	for _, tc := range []struct {
		name   string
		exit   agentproto.ExitStatus
		reason string
	}{
		{"exited", agentproto.ExitStatus{ExitCode: code(3), Reason: agentproto.ReasonExited}, agentproto.ReasonExited},
		{"signaled", agentproto.ExitStatus{Signal: "SIGTERM", Reason: agentproto.ReasonSignaled}, agentproto.ReasonSignaled},
		{"real-time signal", agentproto.ExitStatus{Reason: agentproto.ReasonSignaled}, agentproto.ReasonSignaled},
		{"timeout", agentproto.ExitStatus{Signal: "SIGKILL", Reason: agentproto.ReasonTimeout}, agentproto.ReasonTimeout},
		{"oom", agentproto.ExitStatus{Signal: "SIGKILL", Reason: agentproto.ReasonOOM}, agentproto.ReasonOOM},
		{"claims sandbox_deleted", agentproto.ExitStatus{Reason: agentproto.ReasonSandboxDeleted}, agentproto.ReasonLost},
		{"claims lost with a code", agentproto.ExitStatus{ExitCode: code(0), Reason: agentproto.ReasonLost}, agentproto.ReasonLost},
		{"empty reason", agentproto.ExitStatus{ExitCode: code(0)}, agentproto.ReasonLost},
		{"unknown reason", agentproto.ExitStatus{ExitCode: code(0), Reason: "finished"}, agentproto.ReasonLost},
		{"exit code out of range", agentproto.ExitStatus{ExitCode: code(-9), Reason: agentproto.ReasonExited}, agentproto.ReasonLost},
		{"exited with a signal", agentproto.ExitStatus{ExitCode: code(0), Signal: "SIGKILL", Reason: agentproto.ReasonExited}, agentproto.ReasonLost},
		{"unknown signal", agentproto.ExitStatus{Signal: "SIGBANANA", Reason: agentproto.ReasonSignaled}, agentproto.ReasonLost},
		{"signaled with a code", agentproto.ExitStatus{ExitCode: code(1), Signal: "SIGTERM", Reason: agentproto.ReasonKilled}, agentproto.ReasonLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := d.sourceCommands(sb, 1)[0]
			tc.exit.EndedAt = time.Now().Add(24 * time.Hour) // a guest clock far ahead
			d.svc.RecordExit(ctx, id, &tc.exit, 5)
			c, err := d.store.GetCommand(ctx, d.tenant, sb.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			ex, ok := DecodeExit(c)
			if !ok || c.State != store.CommandExited || ex.Reason != tc.reason {
				t.Fatalf("guest reported %+v: stored %s %+v (ok %v), want reason %s", tc.exit, c.State, ex, ok, tc.reason)
			}
			if ex.EndedAt == nil || ex.EndedAt.After(time.Now()) {
				t.Fatalf("stored end %v, want a time no later than the host's now", ex.EndedAt)
			}
			if tc.reason == agentproto.ReasonLost && (ex.ExitCode != nil || ex.Signal != nil) {
				t.Fatalf("lost exit keeps the guest's code %v / signal %v", ex.ExitCode, ex.Signal)
			}
		})
	}
}

// erringGuest answers every Stat with err.
type erringGuest struct {
	worker.Guest
	err error
}

func (g erringGuest) Stat(context.Context, string) (agentproto.FileInfo, error) {
	return agentproto.FileInfo{}, g.err
}

// TestGuestErrorClasses: the class of a guest's error answer (and so the
// tenant's HTTP status) is the guest's only among those its calls may end
// with; any other becomes internal with the host's message, and a long
// message is cut.
func TestGuestErrorClasses(t *testing.T) {
	d := newDomain(t)
	ctx := context.Background()
	sb := d.create()
	long := strings.Repeat("x", 10*MaxGuestMessage)
	for _, tc := range []struct {
		code  string
		class *errdefs.Class
	}{
		{"not_found", errdefs.ErrNotFound},
		{"invalid_argument", errdefs.ErrInvalidArgument},
		{"conflict", errdefs.ErrConflict},
		{"permission_denied", errdefs.ErrPermissionDenied},
		{"resource_exhausted", errdefs.ErrResourceExhausted},
		{"unavailable", errdefs.ErrUnavailable},
		{"unauthenticated", errdefs.ErrInternal},
		{"payload_too_large", errdefs.ErrInternal},
		{"internal", errdefs.ErrInternal},
		{"no_such_code", errdefs.ErrInternal},
	} {
		answer := (&agentproto.Error{Code: tc.code, Message: "guest says " + tc.code}).Err()
		d.worker.WrapGuest = func(id string, g worker.Guest) worker.Guest { return erringGuest{g, answer} }
		ag, err := d.svc.Agent(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ag.Stat(ctx, "/x")
		c, msg, _ := errdefs.Render(err)
		if c != tc.class {
			t.Errorf("guest answered %s: class %s (%q), want %s", tc.code, c.Code(), msg, tc.class.Code())
		}
		if c == errdefs.ErrInternal && strings.Contains(msg, "guest says") {
			t.Errorf("guest answered %s: its message %q reaches the tenant", tc.code, msg)
		}
	}
	d.worker.WrapGuest = func(id string, g worker.Guest) worker.Guest {
		return erringGuest{g, (&agentproto.Error{Code: "not_found", Message: long}).Err()}
	}
	ag, err := d.svc.Agent(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ag.Stat(ctx, "/x")
	if _, msg, _ := errdefs.Render(err); errdefs.ClassOf(err) != errdefs.ErrNotFound || len(msg) > MaxGuestMessage+len("…") {
		t.Fatalf("a not_found with a %d-byte message: %s with %d bytes, want not_found cut to %d", len(long), errdefs.ClassOf(err).Code(), len(msg), MaxGuestMessage)
	}
}

// TestSettleBroken: a command whose guest broke its event stream past the
// retries (data_loss) ends "lost", decided by the host; other errors leave
// it running.
func TestSettleBroken(t *testing.T) {
	d := newDomain(t)
	ctx := context.Background()
	sb := d.create()
	id := d.sourceCommands(sb, 1)[0]
	c, err := d.store.GetCommand(ctx, d.tenant, sb.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, ended := d.svc.SettleBroken(ctx, sb, c, 4, errdefs.New(errdefs.ErrUnavailable, "link down")); ended {
		t.Fatal("an unavailable link ended the command")
	}
	ex, ended := d.svc.SettleBroken(ctx, sb, c, 4, errdefs.New(errdefs.ErrDataLoss, "broken stream"))
	if !ended || ex.Reason != agentproto.ReasonLost || ex.Seq != 5 {
		t.Fatalf("broken stream: %+v ended %v, want lost at seq 5", ex, ended)
	}
	if c, _ = d.store.GetCommand(ctx, d.tenant, sb.ID, id); c.State != store.CommandExited {
		t.Fatalf("command %s after a broken stream", c.State)
	}
}
