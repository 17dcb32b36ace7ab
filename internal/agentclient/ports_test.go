package agentclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// The agent of these tests runs in the test's own network namespace, so
// "the guest's loopback" is the test machine's: the servers below listen
// on 127.0.0.1 and the agent dials them there.

// listenLoopback listens on 127.0.0.1 on a free port and serves each
// connection with serve in a goroutine; everything ends with the test.
func listenLoopback(t *testing.T, serve func(net.Conn)) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go serve(c)
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// echo copies what it reads back until EOF, then writes "bye" and closes.
func echo(c net.Conn) {
	defer c.Close()
	_, _ = io.Copy(c, c)
	_, _ = c.Write([]byte("bye"))
}

func TestListPortsSeesListener(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	port := listenLoopback(t, echo)
	ports, err := e.c.ListPorts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i, p := range ports {
		if i > 0 && p.Port < ports[i-1].Port {
			t.Errorf("ports not sorted: %v before %v", ports[i-1], p)
		}
		if p.Port == port && p.Address == "127.0.0.1" {
			found = true
		}
	}
	if !found {
		t.Fatalf("ListPorts = %v; no 127.0.0.1:%d", ports, port)
	}
}

func TestDialPortEchoesAndHalfCloses(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	port := listenLoopback(t, echo)
	conn, err := e.c.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo = %q, %v", buf, err)
	}

	// A read deadline that passes is a timeout, and the conn still works.
	_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var ne net.Error
	if _, err := conn.Read(buf); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))

	// Half-close: the server sees EOF, and its answer still arrives.
	cw, ok := conn.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T has no CloseWrite", conn)
	}
	if _, err := conn.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(conn)
	if err != nil || string(rest) != "lastbye" {
		t.Fatalf("after CloseWrite read %q, %v; want \"lastbye\" then EOF", rest, err)
	}
}

func TestDialPortRefusedAndInvalid(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	_, err = e.c.DialPort(ctx, free)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("dial a closed port: %v, want failed_precondition", err)
	}
	if want := "nothing listens on port " + strconv.Itoa(int(free)); !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if _, err := e.c.DialPort(ctx, 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("dial port 0: %v, want invalid_argument", err)
	}
	// A refusal gives its budget slot back: the link is still usable.
	if _, err := e.c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// A port connection whose reader does not read stalls only itself: a
// server that never reads, and one that writes without end to a host that
// never reads, leave another connection and a Ping on the same link
// answering promptly.
func TestDialPortSlowReaderStallsOnlyItsStream(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	sink := listenLoopback(t, func(c net.Conn) { <-ctx.Done() }) // never reads
	firehose := listenLoopback(t, func(c net.Conn) {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	echoPort := listenLoopback(t, echo)

	up, err := e.c.DialPort(ctx, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	written := make(chan error, 1)
	go func() {
		_, err := up.Write(make([]byte, 8<<20))
		written <- err
	}()
	down, err := e.c.DialPort(ctx, firehose)
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	time.Sleep(200 * time.Millisecond) // let both fill their windows (not a synchronisation: the checks below hold either way)

	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := e.c.Ping(quick); err != nil {
		t.Fatalf("ping beside stalled port streams: %v", err)
	}
	conn, err := e.c.DialPort(quick, echoPort)
	if err != nil {
		t.Fatalf("dial beside stalled port streams: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo beside stalled streams = %q, %v", buf, err)
	}
	select {
	case err := <-written:
		t.Logf("the 8 MiB write into a server that never reads ended (kernel buffers took it): %v", err)
	default:
	}

	// Closing the stalled writer's conn unblocks its Write.
	up.Close()
	select {
	case err := <-written:
		if err != nil && !errors.Is(err, net.ErrClosed) {
			t.Logf("stalled write ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock a Write stalled on the stream's window")
	}
}

func TestDialPortLinkDropIsNotEOF(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	port := listenLoopback(t, echo)
	conn, err := e.c.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	e.drop()
	_, err = io.ReadAll(conn)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("read across a dropped link: %v, want unavailable", err)
	}
}

func TestDialPortBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 256 connections")
	}
	e := newEnv(t)
	ctx := ctxT(t)
	port := listenLoopback(t, echo)
	conns := make([]net.Conn, 0, agentclient.MaxPortConnections)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range agentclient.MaxPortConnections {
		c, err := e.c.DialPort(ctx, port)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
	}
	if c, err := e.c.DialPort(ctx, port); !errors.Is(err, errdefs.ErrResourceExhausted) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("connection %d: %v, want resource_exhausted", agentclient.MaxPortConnections+1, err)
	}
	// A closed connection's slot comes back once the guest's side ended
	// (the echo server closes on EOF).
	conns[0].Close()
	conns = conns[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := e.c.DialPort(ctx, port)
		if err == nil {
			conns = append(conns, c)
			break
		}
		if !errors.Is(err, errdefs.ErrResourceExhausted) || time.Now().After(deadline) {
			t.Fatalf("after a close: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestListPortsIPv6(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp6"); err != nil {
		t.Skip("no IPv6 here")
	}
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skip("no ::1 here:", err)
	}
	defer ln.Close()
	e := newEnv(t)
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ports, err := e.c.ListPorts(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := agentproto.ListeningPort{Port: port, Address: "::1"}
	for _, p := range ports {
		if p == want {
			return
		}
	}
	t.Fatalf("ListPorts = %v; no %v", ports, want)
}

// Close ends both directions at once: a Read blocked on a server that says
// nothing returns, and later calls fail net.ErrClosed.
func TestDialPortCloseUnblocksRead(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	quiet := listenLoopback(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c); c.Close() })
	conn, err := e.c.DialPort(ctx, quiet)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		read <- err
	}()
	// However far the Read got, Close must end it.
	conn.Close()
	select {
	case err := <-read:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("blocked Read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock a Read")
	}
	if _, err := conn.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
}
