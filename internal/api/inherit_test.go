package api

import (
	"slices"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
)

// TestBranchInheritsCommands: the commands that ran (or had ended) at a
// checkpoint are command sessions of its branch, with ids of their own,
// that can be read and signalled without touching the parent's.
func TestBranchInheritsCommands(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.bob, nil)
	ended, err := e.bob.Exec(ctx, sb.ID, apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{Shell: "exit 3"}})
	if err != nil || ended.ExitCode == nil || *ended.ExitCode != 3 {
		t.Fatalf("exec: %+v %v", ended, err)
	}
	sleeper, err := e.bob.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Shell: "echo before; exec sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.bob.Events(ctx, sb.ID, sleeper.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("parent's stream: %v", err)
		}
		if ev.Type == apiv1.EventStdout {
			break
		}
	}
	s.Close()
	// A command not yet started at the checkpoint is not inherited.
	if _, err := e.bob.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}

	ck, err := e.bob.CreateCheckpoint(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, &ck.Operation, apiv1.OpSucceeded)
	br, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{FromCheckpoint: ck.Checkpoint.ID})
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, &br.Operation, apiv1.OpSucceeded)

	list, err := e.bob.ListCommands(ctx, br.Sandbox.ID, client.Page{})
	if err != nil || len(list.Commands) != 2 {
		t.Fatalf("branch commands: %+v %v", list, err)
	}
	var run, done apiv1.Command
	for _, c := range list.Commands {
		if c.ID == sleeper.ID || c.ID == ended.CommandID || c.Sandbox != br.Sandbox.ID || c.StartedAt == nil {
			t.Errorf("inherited command %+v", c)
		}
		switch c.Shell {
		case sleeper.Shell:
			run = c
		case "exit 3":
			done = c
		}
	}
	if run.State != "running" {
		t.Fatalf("inherited running command %+v", run)
	}
	if done.State != "exited" || done.Exit == nil || done.Exit.ExitCode == nil || *done.Exit.ExitCode != 3 {
		t.Fatalf("inherited ended command %+v", done)
	}

	// Its events come from the branch's agent, and after= resumes them.
	s, err = e.bob.Events(ctx, br.Sandbox.ID, run.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var seqs []uint64
	for !strings.Contains(out.String(), apitest.InheritedOutput) {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("branch stream: %v", err)
		}
		seqs = append(seqs, ev.Seq)
		if ev.Type == apiv1.EventStdout {
			out.Write(ev.Bytes())
		}
	}
	s.Close()
	s, err = e.bob.Events(ctx, br.Sandbox.ID, run.ID, seqs[0])
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Next(); err != nil || ev.Seq != seqs[1] {
		t.Fatalf("resumed after %d: %+v %v, want seq %d", seqs[0], ev, err, seqs[1])
	}
	s.Close()

	// Signalled in the branch, it ends there; the parent's runs on.
	s, err = e.bob.Events(ctx, br.Sandbox.ID, run.ID, seqs[len(seqs)-1])
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := e.bob.Signal(ctx, br.Sandbox.ID, run.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if _, _, exit := collect(t, s); exit.Signal == nil || *exit.Signal != "SIGKILL" {
		t.Fatalf("branch command exit %+v", exit)
	}
	got, err := e.bob.GetCommand(ctx, br.Sandbox.ID, run.ID)
	if err != nil || got.State != "exited" {
		t.Fatalf("branch command after signal: %+v %v", got, err)
	}
	if got, err := e.bob.GetCommand(ctx, sb.ID, sleeper.ID); err != nil || got.State != "running" {
		t.Fatalf("parent command after the branch's was signalled: %+v %v", got, err)
	}
	// The parent's own list is unchanged, and other tenants see nothing.
	plist, err := e.bob.ListCommands(ctx, sb.ID, client.Page{})
	if err != nil || len(plist.Commands) != 3 || slices.ContainsFunc(plist.Commands, func(c apiv1.Command) bool { return c.ID == run.ID }) {
		t.Fatalf("parent commands: %+v %v", plist, err)
	}
	if _, err := e.alice.GetCommand(ctx, br.Sandbox.ID, run.ID); err == nil {
		t.Fatal("another tenant sees the inherited command")
	}
	if err := e.bob.Signal(ctx, sb.ID, sleeper.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
}
