package agentclient_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// TestEventsGiveUpOnGarbledFrames: an agent that answers every attach of
// an events stream and then sends a frame that does not decode gets its
// stream failed (data_loss, for the host to end the command) after a
// bounded number of attaches, not reattached as fast as the link allows
// until the caller's context ends.
func TestEventsGiveUpOnGarbledFrames(t *testing.T) {
	dir, err := os.MkdirTemp("", "agent-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "a.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var attaches atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				synced, err := agentproto.AgentSync(context.Background(), conn)
				if err != nil {
					return
				}
				sess, err := agentproto.AgentSession(synced)
				if err != nil {
					return
				}
				defer sess.Close()
				for {
					st, err := sess.AcceptStream()
					if err != nil {
						return
					}
					var req agentproto.Request
					if agentproto.ReadFrame(st, &req) != nil || req.Op != agentproto.OpEvents {
						st.Close()
						continue
					}
					attaches.Add(1)
					_ = agentproto.WriteFrame(st, &agentproto.Response{})
					_ = agentproto.WriteFrame(st, map[string]any{"seq": "not a number"})
					st.Close()
				}
			}()
		}
	}()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(dir, "a.sock"))
	}, nil)
	t.Cleanup(func() { c.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.Events(ctx, "cmd_x", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Next()
	n := attaches.Load()
	if errdefs.ClassOf(err) != errdefs.ErrDataLoss || ctx.Err() != nil {
		t.Fatalf("after %d attaches answered with a garbled frame: %v (context: %v), want data_loss before the context ends",
			n, err, ctx.Err())
	}
	if n > 8 {
		t.Fatalf("%d attaches before giving up, want at most 8", n)
	}
	t.Logf("gave up after %d attaches: %v", n, err)
}
