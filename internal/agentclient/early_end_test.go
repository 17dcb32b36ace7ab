package agentclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
)

// TestEventsResumeAfterEarlyEnd: an agent that ends an events stream on a
// live link before the exit event (its write gave up) must not look like a
// finished stream: the client resumes after the last event it delivered and
// sees every event once. The agent here is a stand-in that cuts the first
// stream after two events; the real agent does so only when a link write
// fails, which a test cannot cause on purpose.
func TestEventsResumeAfterEarlyEnd(t *testing.T) {
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
	const exitSeq = 4
	attaches := make(chan uint64, 10)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
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
		for n := 0; ; n++ {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			var req agentproto.Request
			var r agentproto.EventsRequest
			if agentproto.ReadFrame(st, &req) != nil || req.Op != agentproto.OpEvents || json.Unmarshal(req.Args, &r) != nil {
				st.Close()
				return
			}
			attaches <- r.After
			_ = agentproto.WriteFrame(st, &agentproto.Response{})
			ew := agentproto.NewEventWriter(st, r.Raw)
			last := uint64(exitSeq)
			if n == 0 {
				last = 2 // the first stream ends early
			}
			for seq := r.After + 1; seq <= last; seq++ {
				ev := agentproto.Event{Seq: seq, Type: agentproto.EventStdout, Data: []byte{byte('0' + seq)}}
				if seq == exitSeq {
					code := 0
					ev = agentproto.Event{Seq: seq, Type: agentproto.EventExit, Exit: &agentproto.ExitStatus{ExitCode: &code}}
				}
				_ = ew.Write(&ev)
			}
			st.Close()
		}
	}()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", ln.Addr().String())
	}, nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Events(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var seqs []uint64
	for {
		ev, err := s.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("after seqs %v: %v", seqs, err)
			}
			break
		}
		seqs = append(seqs, ev.Seq)
	}
	if len(seqs) != exitSeq || seqs[exitSeq-1] != exitSeq {
		t.Fatalf("events %v, want 1..%d ending with the exit", seqs, exitSeq)
	}
	close(attaches)
	var afters []uint64
	for a := range attaches {
		afters = append(afters, a)
	}
	if len(afters) != 2 || afters[0] != 0 || afters[1] != 2 {
		t.Fatalf("attached with after=%v, want [0 2] (a resume after the last event delivered)", afters)
	}
}
