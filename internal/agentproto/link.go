package agentproto

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// The sync handshake makes a byte stream usable after a reconnection, when
// either direction may still carry bytes of an earlier session (a guest write
// blocked while no host was connected, a host write the guest never read).
//
//	host:  SPACE-SYNC-1 <nonce>\n   at once, then repeated (syncDelay) until acked
//	agent: SPACE-ACK-1 <nonce>\n    once per new nonce
//	host:  SPACE-GO-1 <nonce>\n     after the ack; ends the host's sync lines
//
// Each side discards everything else it reads until the line it waits for.
// The agent starts yamux after GO, so SYNC lines still in flight when the ack
// arrived never reach yamux; the host starts yamux after the ack, and the
// agent writes nothing between its ack and yamux.
const (
	syncMagic = "SPACE-SYNC-1 "
	ackMagic  = "SPACE-ACK-1 "
	goMagic   = "SPACE-GO-1 "
	nonceLen  = 32 // hex characters

	// SyncInterval is how often the host repeats its sync line once the
	// agent has been slow to answer for SyncFastFor.
	SyncInterval = 150 * time.Millisecond
	// SyncFastInterval is how often the host repeats its sync line during
	// the first SyncFastFor. Right after a snapshot restore the agent
	// reopens its port within milliseconds and discards what arrived
	// before; a short repeat gets it a fresh line at once. A line is 46
	// bytes, so the fast phase queues at most ~1.4 KB for an agent that is
	// not reading.
	SyncFastInterval = 10 * time.Millisecond
	SyncFastFor      = 300 * time.Millisecond
)

// syncDelay is the pause before the host's sync line after elapsed time.
func syncDelay(elapsed time.Duration) time.Duration {
	if elapsed < SyncFastFor {
		return SyncFastInterval
	}
	return SyncInterval
}

func newNonce() (string, error) {
	var b [nonceLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// HostSync runs the host side of the handshake on conn and returns the conn
// to run yamux on (it may hold bytes already read past the ack). It gives up
// when ctx is done.
func HostSync(ctx context.Context, conn net.Conn) (net.Conn, error) {
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	stopDeadline := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer func() {
		if stopDeadline() {
			_ = conn.SetDeadline(time.Time{})
		}
	}()

	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		line := []byte(syncMagic + nonce + "\n")
		start := time.Now()
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-stop:
				writerDone <- nil
				return
			case <-t.C:
			}
			if _, err := conn.Write(line); err != nil {
				writerDone <- err
				return
			}
			t.Reset(syncDelay(time.Since(start)))
		}
	}()

	want := []byte(ackMagic + nonce + "\n")
	rest, err := scanFor(conn, want)
	close(stop)
	werr := <-writerDone
	if err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("agent link sync: %w", ctx.Err())
		}
		return nil, fmt.Errorf("agent link sync: %w", err)
	}
	if _, err := conn.Write([]byte(goMagic + nonce + "\n")); err != nil {
		return nil, fmt.Errorf("agent link sync: %w", err)
	}
	return &prefixConn{Conn: conn, prefix: rest}, nil
}

// scanFor reads r until want appears and returns the bytes read after it.
func scanFor(r io.Reader, want []byte) ([]byte, error) {
	buf := make([]byte, 0, 4096)
	chunk := make([]byte, 4096)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if i := bytes.Index(buf, want); i >= 0 {
			return append([]byte(nil), buf[i+len(want):]...), nil
		}
		if keep := len(want) - 1; len(buf) > keep {
			buf = append(buf[:0], buf[len(buf)-keep:]...)
		}
		if err != nil {
			if err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// AgentSync runs the agent side of the handshake on conn: it acknowledges
// every new sync nonce it sees and returns once the host confirmed one with
// its GO line. It returns io.EOF when the stream ends before that (under
// virtio-serial that means no host is connected yet). ctx cancels it by
// expiring conn's deadline.
func AgentSync(ctx context.Context, conn net.Conn) (net.Conn, error) {
	stopDeadline := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer func() {
		if stopDeadline() {
			_ = conn.SetDeadline(time.Time{})
		}
	}()
	var (
		acked string
		buf   []byte
		chunk = make([]byte, 4096)
	)
	for {
		for {
			kind, nonce, used, ok := nextLine(buf)
			buf = buf[used:]
			if !ok {
				break
			}
			switch {
			case kind == syncMagic && nonce != acked:
				if _, err := conn.Write([]byte(ackMagic + nonce + "\n")); err != nil {
					return nil, err
				}
				acked = nonce
			case kind == goMagic && nonce == acked && acked != "":
				return &prefixConn{Conn: conn, prefix: append([]byte(nil), buf...)}, nil
			}
		}
		n, err := conn.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if err != nil && n == 0 {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.EOF
			}
			return nil, err
		}
	}
}

// nextLine finds the next complete, well-formed SYNC or GO line in buf. It
// returns how many bytes of buf are consumed (garbage included) and ok=false
// when buf holds no complete line yet; the unconsumed rest may still start
// one.
func nextLine(buf []byte) (kind, nonce string, used int, ok bool) {
	for {
		i, k := indexMagic(buf[used:])
		if i < 0 {
			// Keep a tail that could be the start of a magic line.
			keep := len(goMagic)
			if len(syncMagic) > keep {
				keep = len(syncMagic)
			}
			if len(buf)-used > keep {
				used = len(buf) - keep
			}
			return "", "", used, false
		}
		used += i
		line := buf[used:]
		need := len(k) + nonceLen + 1
		if len(line) < need {
			return "", "", used, false
		}
		n := string(line[len(k) : len(k)+nonceLen])
		if line[need-1] != '\n' || !isHex(n) {
			used++
			continue
		}
		return k, n, used + need, true
	}
}

func indexMagic(b []byte) (int, string) {
	s := bytes.Index(b, []byte(syncMagic))
	g := bytes.Index(b, []byte(goMagic))
	switch {
	case s < 0 && g < 0:
		return -1, ""
	case g < 0 || (s >= 0 && s < g):
		return s, syncMagic
	default:
		return g, goMagic
	}
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// prefixConn replays bytes read during the handshake before reading conn.
type prefixConn struct {
	net.Conn
	mu     sync.Mutex
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// YamuxConfig is the yamux configuration both sides use.
func YamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = true
	cfg.KeepAliveInterval = KeepAliveInterval
	cfg.ConnectionWriteTimeout = WriteTimeout
	cfg.StreamCloseTimeout = time.Minute
	return cfg
}

// hostConfig is YamuxConfig for the host, which never accepts a stream
// (guardConn drops a session whose agent opens one before yamux sees it):
// the smallest backlog yamux allows.
func hostConfig() *yamux.Config {
	cfg := YamuxConfig()
	cfg.AcceptBacklog = 1
	return cfg
}

// HostSession starts the host's yamux client on a synced conn. onAbuse
// (may be nil) is called once if the session ends because the agent broke
// one of the link's bounds (the error wraps ErrLinkAbuse): the host's
// record of why a guest lost its link.
func HostSession(conn net.Conn, onAbuse func(error)) (*yamux.Session, error) {
	return yamux.Client(newFrameConn(newGuardConn(conn, false, WriteTimeout, onAbuse)), hostConfig())
}

// AgentSession starts the agent's yamux server on a synced conn.
func AgentSession(conn net.Conn) (*yamux.Session, error) {
	return yamux.Server(newFrameConn(newGuardConn(conn, true, WriteTimeout, nil)), YamuxConfig())
}
