package agentproto

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
)

// writeLog records every write that reaches the connection under yamux.
type writeLog struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, append([]byte(nil), p...))
	w.mu.Unlock()
	return w.Conn.Write(p)
}

// TestFrameConnJoinsHeaderAndBody runs a real yamux session over a frameConn
// and checks that every data frame with a body reached the connection as
// one write holding its header and exactly its body, that control frames
// (window updates, SYN) went out at once, and that the bytes arrive intact.
func TestFrameConnJoinsHeaderAndBody(t *testing.T) {
	a, b := socketPair(t)
	logged := &writeLog{Conn: a}
	agent, err := AgentSession(logged) // frameConn over logged
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	host, err := HostSession(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()

	payload := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 000 bytes
	got := make(chan []byte, 1)
	go func() {
		st, err := host.OpenStream()
		if err != nil {
			got <- nil
			return
		}
		_, _ = st.Write([]byte("go"))
		data, _ := io.ReadAll(st)
		got <- data
	}()
	st, err := agent.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	hello := make([]byte, 2)
	if _, err := io.ReadFull(st, hello); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(payload); off += 100000 {
		if _, err := st.Write(payload[off:min(off+100000, len(payload))]); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	if data := <-got; !bytes.Equal(data, payload) {
		t.Fatalf("host read %d bytes, want the %d written", len(data), len(payload))
	}

	logged.mu.Lock()
	defer logged.mu.Unlock()
	dataFrames := 0
	for i, w := range logged.writes {
		if len(w) < yamuxHeaderSize {
			t.Fatalf("write %d is %d bytes, shorter than a yamux header", i, len(w))
		}
		n := int(binary.BigEndian.Uint32(w[8:12]))
		if w[1] != yamuxTypeData {
			if len(w) != yamuxHeaderSize {
				t.Errorf("control frame write %d carries %d bytes after its header", i, len(w)-yamuxHeaderSize)
			}
			continue
		}
		if len(w) != yamuxHeaderSize+n {
			t.Errorf("data frame write %d: %d bytes, header says %d of body", i, len(w), n)
		}
		if n > 0 {
			dataFrames++
		}
	}
	if dataFrames < len(payload)/100000 {
		t.Errorf("%d data frames with a body, want at least %d", dataFrames, len(payload)/100000)
	}
}
