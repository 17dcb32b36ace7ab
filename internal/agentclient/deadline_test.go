package agentclient_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// stalledAgent completes the handshake and accepts streams, then never
// answers: a guest whose agent is frozen, paused or starved.
func stalledAgent(t *testing.T, handshake bool) agentclient.DialFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return func(dctx context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		context.AfterFunc(ctx, func() { guest.Close() })
		go func() {
			if !handshake {
				<-ctx.Done() // reads nothing, answers nothing
				return
			}
			synced, err := agentproto.AgentSync(ctx, guest)
			if err != nil {
				return
			}
			sess, err := agentproto.AgentSession(synced)
			if err != nil {
				return
			}
			context.AfterFunc(ctx, func() { sess.Close() })
			for {
				st, err := sess.AcceptStream()
				if err != nil {
					return
				}
				_ = st // held open, never answered
			}
		}()
		return host, nil
	}
}

// Calls made with a context that has no deadline still end, with
// deadline_exceeded, when the agent never answers.
func TestCallsAreBoundedWithoutCallerDeadline(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handshake bool
		call      func(*agentclient.Client) error
	}{
		{"ping, agent silent", true, func(c *agentclient.Client) error { _, err := c.Ping(context.Background()); return err }},
		{"thaw, agent silent", true, func(c *agentclient.Client) error { return c.Thaw(context.Background()) }},
		{"list, agent silent", true, func(c *agentclient.Client) error { _, err := c.List(context.Background()); return err }},
		{"read file, agent silent", true, func(c *agentclient.Client) error {
			_, _, err := c.ReadFile(context.Background(), "/etc/hostname")
			return err
		}},
		{"tar out, agent silent", true, func(c *agentclient.Client) error {
			_, err := c.TarOut(context.Background(), "/")
			return err
		}},
		{"ping, no handshake", false, func(c *agentclient.Client) error { _, err := c.Ping(context.Background()); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := agentclient.New(stalledAgent(t, tc.handshake), nil)
			defer c.Close()
			c.SetTimeouts(agentclient.Timeouts{Connect: 300 * time.Millisecond, Call: 300 * time.Millisecond})
			done := make(chan error, 1)
			go func() { done <- tc.call(c) }()
			select {
			case err := <-done:
				if !errors.Is(err, errdefs.ErrDeadlineExceeded) {
					t.Fatalf("err = %v, want deadline_exceeded", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("call into a silent agent did not end")
			}
		})
	}
}

// A caller's shorter deadline wins over the client's bound.
func TestCallerDeadlineWins(t *testing.T) {
	c := agentclient.New(stalledAgent(t, true), nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Ping(ctx) // the client's own bound is 30 s
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("err = %v, want deadline_exceeded", err)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("ping took %s, the caller's deadline was 100ms", time.Since(start))
	}
}
