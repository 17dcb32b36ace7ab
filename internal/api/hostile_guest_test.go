package api

import (
	"context"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// lyingAgent starts processes in the real agent, then answers their event
// streams as a hostile guest would: with an exit it may not report
// (a host-only reason, or none at all), or by breaking the stream past the
// link's retries (the client's data_loss).
type lyingAgent struct {
	worker.Guest
	exit   *agentproto.ExitStatus // the exit event's; nil: the stream breaks
	noExit bool                   // an exit event without an exit status
}

func (a lyingAgent) Events(ctx context.Context, id string, after uint64) (agentproto.EventStream, error) {
	return &lyingStream{a: a, after: after}, nil
}

type lyingStream struct {
	a     lyingAgent
	after uint64
}

func (s *lyingStream) Next() (agentproto.Event, error) {
	switch {
	case s.a.noExit:
		return agentproto.Event{Seq: s.after + 1, Type: agentproto.EventExit, Time: time.Now()}, nil
	case s.a.exit != nil:
		return agentproto.Event{Seq: s.after + 1, Type: agentproto.EventExit, Time: time.Now(), Exit: s.a.exit}, nil
	}
	return agentproto.Event{}, errdefs.New(errdefs.ErrDataLoss, "the sandbox's agent broke the command's event stream 8 times in a row")
}

func (s *lyingStream) Close() error { return nil }

// TestGuestCannotChooseOutcome: whatever a guest says of how a command
// ended, or however it breaks the command's stream, exec, the event stream
// and the stored command report what the host decided: a host-only or
// missing reason, and a stream broken for good, are "lost".
func TestGuestCannotChooseOutcome(t *testing.T) {
	e := newEnv(t, Config{})
	sb := e.running(e.alice, nil)
	code := 0
	for _, tc := range []struct {
		name  string
		agent func(worker.Guest) lyingAgent
	}{
		{"claims sandbox_deleted", func(g worker.Guest) lyingAgent {
			return lyingAgent{Guest: g, exit: &agentproto.ExitStatus{Reason: agentproto.ReasonSandboxDeleted}}
		}},
		{"claims exited with no code", func(g worker.Guest) lyingAgent {
			return lyingAgent{Guest: g, exit: &agentproto.ExitStatus{Reason: agentproto.ReasonExited}}
		}},
		{"empty reason", func(g worker.Guest) lyingAgent {
			return lyingAgent{Guest: g, exit: &agentproto.ExitStatus{ExitCode: &code}}
		}},
		{"exit event without an exit", func(g worker.Guest) lyingAgent { return lyingAgent{Guest: g, noExit: true} }},
		{"broken stream", func(g worker.Guest) lyingAgent { return lyingAgent{Guest: g} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.worker.WrapGuest = func(id string, g worker.Guest) worker.Guest { return tc.agent(g) }
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			res, err := e.alice.Exec(ctx, sb.ID, apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{Shell: "sleep 30"}})
			if err != nil || res.Reason != agentproto.ReasonLost || res.ExitCode != nil {
				t.Fatalf("exec: %+v %v, want reason lost and no exit code", res, err)
			}
			if c, err := e.alice.GetCommand(ctx, sb.ID, res.CommandID); err != nil || c.Exit == nil || c.Exit.Reason != agentproto.ReasonLost {
				t.Fatalf("stored command after exec: %+v %v, want exited lost", c, err)
			}
			cmd, err := e.alice.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Shell: "sleep 30"})
			if err != nil {
				t.Fatal(err)
			}
			s, err := e.alice.Events(ctx, sb.ID, cmd.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for {
				ev, err := s.Next()
				if err != nil {
					t.Fatalf("stream ended before an exit event: %v", err)
				}
				if ev.Type == apiv1.EventError {
					t.Fatalf("stream ended with error %s %s, want an exit event", ev.Code, ev.Message)
				}
				if ev.Type == apiv1.EventExit {
					if ev.Reason != agentproto.ReasonLost {
						t.Fatalf("exit event reason %q, want lost", ev.Reason)
					}
					break
				}
			}
		})
	}
	e.worker.WrapGuest = nil
}
