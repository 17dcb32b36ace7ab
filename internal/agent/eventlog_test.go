package agent

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
)

func TestEventLogEvictionAndGap(t *testing.T) {
	l := newEventLog(10)
	l.append(agentproto.Event{Type: agentproto.EventStarted}) // seq 1
	for i := 0; i < 5; i++ {
		l.append(agentproto.Event{Type: agentproto.EventStdout, Data: []byte("abcd")}) // seq 2..6
	}
	// 20 bytes appended, limit 10: seqs 1..4 evicted (8 data bytes), 5..6 kept.
	tests := []struct {
		after     uint64
		wantFirst uint64
		gapSeq    uint64
		lost      int64
	}{
		{after: 0, gapSeq: 4, lost: 12, wantFirst: 5},
		{after: 2, gapSeq: 4, lost: 8, wantFirst: 5},
		{after: 4, wantFirst: 5},
		{after: 5, wantFirst: 6},
	}
	for _, tt := range tests {
		evs, done, _ := l.since(tt.after)
		if done {
			t.Fatal("done before exit")
		}
		i := 0
		if tt.gapSeq != 0 {
			if evs[0].Type != agentproto.EventGap || evs[0].Seq != tt.gapSeq || evs[0].LostBytes != tt.lost {
				t.Fatalf("after %d: gap %+v", tt.after, evs[0])
			}
			i = 1
		}
		if evs[i].Seq != tt.wantFirst {
			t.Fatalf("after %d: first %+v", tt.after, evs[i])
		}
	}
	l.append(agentproto.Event{Type: agentproto.EventExit})
	evs, done, _ := l.since(6)
	if !done || len(evs) != 1 || evs[0].Type != agentproto.EventExit || evs[0].Seq != 7 {
		t.Fatalf("exit: %v %+v", done, evs)
	}
	if l.append(agentproto.Event{Type: agentproto.EventStdout}) != 0 {
		t.Fatal("append after exit")
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]string{"SIGTERM": "SIGTERM", "term": "SIGTERM", "KILL": "SIGKILL", "9": "SIGKILL", "2": "SIGINT"} {
		sig, err := agentproto.ParseSignal(in)
		if err != nil || unix.SignalName(sig) != want {
			t.Errorf("%s: %v %v", in, sig, err)
		}
	}
	for _, bad := range []string{"", "SIGNOPE", "0", "99"} {
		if _, err := agentproto.ParseSignal(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
