package agentproto

import (
	"io"
	"testing"
)

// BenchmarkEventStream streams stdout events of MaxEventChunk bytes from an
// agent session to a host session over a socket pair, as the agent's
// process pump does, and reads them back with ReadEvent: the user-space
// cost of the link per byte (copies, frames, window updates) without a VM.
//
//	go test -run - -bench EventStream -benchtime 2000x ./internal/agentproto/
func BenchmarkEventStream(b *testing.B) {
	a, h := socketPair(b)
	agent, err := AgentSession(a)
	if err != nil {
		b.Fatal(err)
	}
	defer agent.Close()
	host, err := HostSession(h, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer host.Close()
	data := make([]byte, MaxEventChunk)
	read := make(chan error, 1)
	go func() {
		st, err := host.OpenStream()
		if err != nil {
			read <- err
			return
		}
		defer st.Close()
		if _, err := st.Write([]byte{1}); err != nil {
			read <- err
			return
		}
		for i := 0; i < b.N; i++ {
			var ev Event
			if err := ReadEvent(st, &ev); err != nil {
				read <- err
				return
			}
		}
		read <- nil
	}()
	st, err := agent.AcceptStream()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(st, make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	ew := NewEventWriter(st, true)
	for i := 0; i < b.N; i++ {
		if err := ew.Write(&Event{Seq: uint64(i + 1), Type: EventStdout, Data: data}); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-read; err != nil {
		b.Fatal(err)
	}
}
