package agentclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

func TestLinkDropMidStreamResumes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if _, err := e.c.Start(ctx, agentproto.ProcessSpec{ID: "cat", Argv: []string{"cat"}, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	s, err := e.c.Events(ctx, "cat", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &result{}
	var want bytes.Buffer
	for round := range 5 {
		line := fmt.Sprintf("round %d\n", round)
		want.WriteString(line)
		if err := e.c.Stdin(ctx, "cat", []byte(line), false); err != nil {
			t.Fatalf("stdin after drop: %v", err)
		}
		for !strings.HasSuffix(r.stdout.String(), line) {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			r.add(ev)
		}
		e.drop()                                 // the link dies; the next call and the stream redial
		if _, err := e.c.Ping(ctx); err != nil { // idempotent: retried on the new link
			t.Fatal(err)
		}
	}
	// Output produced while nobody is connected is kept for the reader.
	if err := e.c.Stdin(ctx, "cat", []byte("tail\n"), true); err != nil {
		t.Fatal(err)
	}
	want.WriteString("tail\n")
	e.drop()
	if _, err := e.c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	rest := drain(t, s)
	r.events = append(r.events, rest.events...)
	r.stdout.Write(rest.stdout.Bytes())
	checkSeqs(t, r.events, 1)
	if r.stdout.String() != want.String() || rest.exit == nil {
		t.Fatalf("got %q want %q exit %+v", r.stdout.String(), want.String(), rest.exit)
	}
	e.mu.Lock()
	dials := e.dials
	e.mu.Unlock()
	if dials < 6 {
		t.Fatalf("only %d dials for 6 drops", dials)
	}
}

func TestLinkDropDuringFlood(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const lines = 3000
	_, err := e.c.Start(ctx, agentproto.ProcessSpec{ID: "flood", Shell: fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo line$i; i=$((i+1)); done", lines)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.c.Events(ctx, "flood", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &result{}
	for n := 0; ; n++ {
		ev, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		r.add(ev)
		if n%7 == 3 {
			e.drop()
		}
	}
	checkSeqs(t, r.events, 1)
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	if r.stdout.String() != want.String() {
		t.Fatalf("output differs: got %d bytes want %d", r.stdout.Len(), want.Len())
	}
}

func TestHandshakeWithGarbageOnTheLine(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	e.mu.Lock()
	e.preamble = []byte("\x00\x00\x00\x10{\"op\":\"ping\"}\x00\x02\x00\x01 old yamux SPACE-SYNC-1 0123\nSPACE-GO-1 " +
		strings.Repeat("f", 32) + "\nSPACE-SYNC-1 " + strings.Repeat("e", 32) + "\n")
	e.mu.Unlock()
	for range 3 {
		if _, err := e.c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		e.drop()
	}
}

// TestInBandResync is the snapshot-restore case: the agent's session never
// saw the link go down, and the host simply starts a new handshake on the
// same byte stream. The agent must notice and re-sync.
func TestInBandResync(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// One long-lived stream to the agent, shared by "successive hosts".
	conn, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hosts := 0
	dial := func(ctx context.Context) (net.Conn, error) {
		hosts++
		_ = conn.SetDeadline(time.Time{})
		return keepOpen{conn}, nil
	}
	for range 3 {
		c := agentclient.New(dial, nil)
		if _, err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		c.Close() // drops yamux without closing the stream
	}
	if hosts < 3 {
		t.Fatalf("%d hosts", hosts)
	}
}

// keepOpen keeps the underlying stream open when a client closes its link,
// only interrupting pending I/O (as a VMM's replaced connection would).
type keepOpen struct{ net.Conn }

func (k keepOpen) Close() error { return k.Conn.SetDeadline(time.Now()) }

func TestUnreachableAgent(t *testing.T) {
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		return nil, errors.New("vm not running")
	}, nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("ping: %v", err)
	}
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if _, err := c.WaitReady(short); !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("wait ready: %v", err)
	}
	c.Close()
	if _, err := c.Ping(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("closed client: %v", err)
	}
}

// A connection that takes the host's bytes and never carries any back (as
// a QEMU port was seen to after a resume with a new host) must not hold the
// handshake: the client redials within its connect bound.
func TestHandshakeRedialsPastDeafConnection(t *testing.T) {
	e := newEnv(t)
	var deafDials int
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		if deafDials == 0 {
			deafDials++
			host, deaf := net.Pipe()
			go func() { _, _ = io.Copy(io.Discard, deaf) }()
			t.Cleanup(func() { deaf.Close() })
			return host, nil
		}
		return e.dial(ctx)
	}, nil)
	defer c.Close()
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if deafDials != 1 || e.dials != 1 {
		t.Fatalf("deaf dials %d, agent dials %d; want 1 and 1", deafDials, e.dials)
	}
}
