package agentproto

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// socketPair returns two connected, buffered stream sockets, so bytes can
// be left on the line before either side starts (as on a virtio port).
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "sock")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := Request{Op: OpPing}
	if err := WriteFrame(&buf, &in); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("raw tail")
	var out Request
	if err := ReadFrame(&buf, &out); err != nil {
		t.Fatal(err)
	}
	if out.Op != OpPing || buf.String() != "raw tail" {
		t.Fatalf("got %+v, rest %q", out, buf.String())
	}
	if err := ReadFrame(&buf, &out); err == nil {
		t.Fatal("garbage decoded as a frame")
	}
	if err := ReadFrame(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}), &out); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("oversized frame: %v", err)
	}
	if err := WriteFrame(io.Discard, strings.Repeat("x", MaxFrameSize)); !errors.Is(err, errdefs.ErrPayloadTooLarge) {
		t.Fatalf("oversized write: %v", err)
	}
	if err := ReadFrame(bytes.NewReader(nil), &out); err != io.EOF {
		t.Fatalf("empty stream: %v", err)
	}
}

func TestErrorRoundTrip(t *testing.T) {
	e := ErrorFrom(errdefs.New(errdefs.ErrNotFound, "process %q not found", "x"))
	if e.Code != "not_found" {
		t.Fatalf("code %q", e.Code)
	}
	if err := e.Err(); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != `process "x" not found` {
		t.Fatalf("err %v", err)
	}
}

func TestSyncThroughStaleBytes(t *testing.T) {
	host, guest := socketPair(t)
	// Left over from earlier sessions in both directions: garbage, yamux
	// headers, partial and complete magic lines with foreign nonces.
	stale := "\x00\x02\x00\x01\x00\x00\x00\x07junk SPACE-SYNC-1 1234\nSPACE-GO-1 " + strings.Repeat("a", 32) +
		"\nSPACE-SYNC-1 " + strings.Repeat("b", 32) + "\nSPACE-SYNC-1 zz"
	if _, err := host.Write([]byte(stale)); err != nil {
		t.Fatal(err)
	}
	if _, err := guest.Write([]byte("SPACE-ACK-1 " + strings.Repeat("c", 32) + "\n\x00\x00garbage")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		c   net.Conn
		err error
	}
	agentDone := make(chan res, 1)
	go func() {
		c, err := AgentSync(ctx, guest)
		agentDone <- res{c, err}
	}()
	hc, err := HostSync(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	ar := <-agentDone
	if ar.err != nil {
		t.Fatal(ar.err)
	}
	// yamux must run cleanly on top.
	srv, err := AgentSession(ar.c)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := HostSession(hc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	go func() {
		st, err := srv.AcceptStream()
		if err != nil {
			return
		}
		var req Request
		if ReadFrame(st, &req) == nil {
			_ = WriteFrame(st, &Response{Result: []byte(`"` + string(req.Op) + `"`)})
		}
		st.Close()
	}()
	st, err := cli.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(st, &Request{Op: OpPing}); err != nil {
		t.Fatal(err)
	}
	var resp Response
	if err := ReadFrame(st, &resp); err != nil {
		t.Fatal(err)
	}
	if string(resp.Result) != `"ping"` {
		t.Fatalf("result %s", resp.Result)
	}
}

func TestHostSyncGivesUpWithContext(t *testing.T) {
	host, _ := socketPair(t) // nobody answers
	ctx, cancel := context.WithTimeout(context.Background(), 3*SyncInterval)
	defer cancel()
	if _, err := HostSync(ctx, host); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
}

func TestAgentSyncEOF(t *testing.T) {
	host, guest := socketPair(t)
	host.Write([]byte("partial SPACE-SYNC"))
	host.Close()
	if _, err := AgentSync(context.Background(), guest); err != io.EOF {
		t.Fatalf("err %v", err)
	}
}
