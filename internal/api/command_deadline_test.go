package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/worker"
)

// wedgedAgent starts processes in the real agent but then neither streams
// their events nor answers about them, as a guest does when a fork bomb or
// a wedged VM starves its agent: every such call waits until its context
// ends. With gone set the calls fail at once, as when the link is down.
type wedgedAgent struct {
	worker.Guest
	gone bool
}

func (a wedgedAgent) stall(ctx context.Context) error {
	if a.gone {
		return errdefs.New(errdefs.ErrUnavailable, "agent link is down")
	}
	<-ctx.Done()
	return fmt.Errorf("agent call: %w: %w", errdefs.ErrDeadlineExceeded, ctx.Err())
}

func (a wedgedAgent) Events(ctx context.Context, id string, after uint64) (agentproto.EventStream, error) {
	return wedgedStream{ctx: ctx, a: a}, nil
}

func (a wedgedAgent) Get(ctx context.Context, id string) (agentproto.ProcessInfo, error) {
	return agentproto.ProcessInfo{}, a.stall(ctx)
}

func (a wedgedAgent) List(ctx context.Context) ([]agentproto.ProcessInfo, error) {
	return nil, a.stall(ctx)
}

func (a wedgedAgent) Signal(ctx context.Context, id, sig string) error { return a.stall(ctx) }

type wedgedStream struct {
	ctx context.Context
	a   wedgedAgent
}

func (s wedgedStream) Next() (agentproto.Event, error) { return agentproto.Event{}, s.a.stall(s.ctx) }
func (s wedgedStream) Close() error                    { return nil }

// TestCommandDeadlineWithoutGuest: a command's timeout_seconds holds even
// when the guest never reports the exit: exec answers `timeout`, the event
// stream ends with a `timeout` exit event, reads of commands answer at
// once, and with the link gone the command ends `lost`.
func TestCommandDeadlineWithoutGuest(t *testing.T) {
	e := newEnv(t, Config{})
	sb := e.running(e.alice, nil)
	e.worker.WrapGuest = func(id string, g worker.Guest) worker.Guest { return wedgedAgent{Guest: g} }
	// The server decides within timeout + sandbox.DeadlineGrace + sandbox.ProbeTimeout;
	// the bound is generous, the test only needs it to be finite.
	bound := 1*time.Second + sandbox.DeadlineGrace + sandbox.ProbeTimeout + 20*time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 2*bound)
	defer cancel()

	type result struct {
		what, reason string
		err          error
	}
	results := make(chan result, 2)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		res, err := e.alice.Exec(ctx, sb.ID, apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{
			Shell: "sleep 60", TimeoutSeconds: 1}})
		if err != nil {
			results <- result{"exec", "", err}
			return
		}
		results <- result{"exec", res.Reason, nil}
	}()
	cmd, err := e.alice.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Shell: "sleep 60", TimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		s, err := e.alice.Events(ctx, sb.ID, cmd.ID, 0)
		if err != nil {
			results <- result{"events", "", err}
			return
		}
		defer s.Close()
		for {
			ev, err := s.Next()
			if err != nil {
				results <- result{"events", "", fmt.Errorf("stream ended before an exit event: %w", err)}
				return
			}
			if ev.Type == apiv1.EventExit || ev.Type == apiv1.EventError {
				results <- result{"events", ev.Reason + ev.Code, nil}
				return
			}
		}
	}()
	for range 2 {
		select {
		case r := <-results:
			if r.err != nil || r.reason != agentproto.ReasonTimeout {
				t.Errorf("%s ended %q, %v; want reason timeout", r.what, r.reason, r.err)
			}
		case <-ctx.Done():
			t.Fatal("a command call did not end although the command's deadline passed")
		}
	}

	// Reads answer within their budget although the guest does not.
	rctx, rcancel := context.WithTimeout(ctx, sandbox.RefreshBudget+sandbox.ProbeTimeout+10*time.Second)
	defer rcancel()
	list, err := e.alice.ListCommands(rctx, sb.ID, client.Page{})
	if err != nil {
		t.Fatalf("list commands on a wedged guest: %v", err)
	}
	for _, c := range list.Commands {
		if c.State != apiv1.CommandExited || c.Exit == nil || c.Exit.Reason != agentproto.ReasonTimeout {
			t.Errorf("command %s: %s %+v, want exited timeout", c.ID, c.State, c.Exit)
		}
	}

	// With the link gone, a command still running past its deadline is lost.
	cmd, err = e.alice.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Shell: "sleep 60", TimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Started by the real agent, then the link goes.
	e.worker.WrapGuest = func(id string, g worker.Guest) worker.Guest { return wedgedAgent{Guest: g, gone: true} }
	// The attach starts it; its stream breaks at once (an error event).
	if s, err := e.alice.Events(ctx, sb.ID, cmd.ID, 0); err == nil {
		s.Close()
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := e.alice.GetCommand(ctx, sb.ID, cmd.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == apiv1.CommandExited {
			if got.Exit == nil || got.Exit.Reason != agentproto.ReasonLost {
				t.Fatalf("exit %+v with the link gone, want reason lost", got.Exit)
			}
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("command still %s long after its deadline with the link gone", got.State)
		}
	}
}
