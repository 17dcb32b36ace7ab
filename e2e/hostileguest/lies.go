package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
)

// lyingAgent serves the host's requests on the taken-over link as an agent
// that lies: every events stream gets output events as large as the
// protocol allows, all under one repeated sequence number, as fast as the
// link takes them, among them an exit claiming a reason only the host may
// decide;
// every other request is answered twice, each time with the largest frame
// the protocol allows, of a shape no operation expects.
func lyingAgent(ctx context.Context, c net.Conn) string {
	sess, err := agentproto.AgentSession(c)
	if err != nil {
		return fmt.Sprintf("session: %v", err)
	}
	context.AfterFunc(ctx, func() { _ = sess.Close() })
	var streams, events, answers atomic.Int64
	big, _ := json.Marshal(strings.Repeat("x", agentproto.MaxFrameSize-64))
	data := make([]byte, agentproto.MaxEventChunk)
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			break
		}
		streams.Add(1)
		go func() {
			defer st.Close()
			var req agentproto.Request
			if agentproto.ReadFrame(st, &req) != nil {
				return
			}
			if req.Op != agentproto.OpEvents {
				for range 2 {
					if agentproto.WriteFrame(st, &agentproto.Response{Result: big}) == nil {
						answers.Add(1)
					}
				}
				return
			}
			var r agentproto.EventsRequest
			_ = json.Unmarshal(req.Args, &r)
			if agentproto.WriteFrame(st, &agentproto.Response{}) != nil {
				return
			}
			ew := agentproto.NewEventWriter(st, r.Raw)
			for i := 0; ctx.Err() == nil; i++ {
				ev := agentproto.Event{Seq: r.After + 1, Type: agentproto.EventStdout, Time: time.Now(), Data: data}
				if i == 8 {
					ev = agentproto.Event{Seq: r.After + 1, Type: agentproto.EventExit, Time: time.Now(),
						Exit: &agentproto.ExitStatus{Reason: "sandbox_deleted"}}
				}
				if ew.Write(&ev) != nil {
					return
				}
				events.Add(1)
			}
		}()
	}
	return fmt.Sprintf("streams=%d events=%d answers=%d", streams.Load(), events.Load(), answers.Load())
}
