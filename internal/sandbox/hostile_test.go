package sandbox

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
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
