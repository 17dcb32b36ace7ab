package agentproto

import (
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// yamuxFrame is one yamux header (no body).
func yamuxFrame(typ byte, flags uint16, stream, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint16(h[2:], flags)
	binary.BigEndian.PutUint32(h[4:], stream)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

// abuseRecorder is an onAbuse that keeps the error.
type abuseRecorder chan error

func (a abuseRecorder) record(err error) {
	select {
	case a <- err:
	default:
	}
}

// waitClosed waits (bounded) for the session to end and returns the
// abuse error it reported, if any.
func waitClosed(t *testing.T, sess *yamux.Session, abuse abuseRecorder, within time.Duration) error {
	t.Helper()
	select {
	case <-sess.CloseChan():
	case <-time.After(within):
		t.Fatalf("the session is still up after %s", within)
	}
	select {
	case err := <-abuse:
		return err
	default:
		return nil
	}
}

// TestPingFloodDropsSession floods the host with pings from a guest that
// never reads, as a hostile agent can: yamux v0.1.2 alone answers each in a
// goroutine of its own that waits for a send loop the guest blocks, so the
// host's goroutines and memory grew with the flood (165,000 goroutines and
// 540 MiB in 2 s here). The host must drop the session with a bounded
// number of goroutines.
func TestPingFloodDropsSession(t *testing.T) {
	host, guest := socketPair(t)
	before := runtime.NumGoroutine()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	abuse := make(abuseRecorder, 1)
	sess, err := HostSession(host, abuse.record)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	stop := make(chan struct{})
	defer close(stop)
	go func() {
		batch := make([]byte, 0, 4096*yamuxHeaderSize)
		for id := uint32(0); ; {
			batch = batch[:0]
			for range 4096 {
				batch = append(batch, yamuxFrame(yamuxTypePing, yamuxFlagSYN, 0, id)...)
				id++
			}
			select {
			case <-stop:
				return
			default:
			}
			if _, err := guest.Write(batch); err != nil {
				return
			}
		}
	}()

	const maxExtra = 200 // yamux's own goroutines and a burst of ping replies
	peak := 0
	deadline := time.Now().Add(5 * time.Second)
	for !sess.IsClosed() {
		if time.Now().After(deadline) {
			t.Fatalf("the session survived 5 s of ping flood (peak %d goroutines more)", peak)
		}
		if g := runtime.NumGoroutine() - before; g > peak {
			peak = g
		}
		if peak > maxExtra {
			t.Fatalf("the ping flood made %d goroutines (more than %d)", peak, maxExtra)
		}
		time.Sleep(time.Millisecond)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("session dropped; peak %d goroutines over the %d before; heap+stack grew %.1f MiB",
		peak, before, (float64(ms.HeapInuse+ms.StackInuse)-float64(ms0.HeapInuse+ms0.StackInuse))/(1<<20))
	if err := waitClosed(t, sess, abuse, time.Second); !errors.Is(err, ErrLinkAbuse) {
		t.Fatalf("abuse reported: %v", err)
	}
}

// TestKeepAlivePingsPass: a peer pinging at the keepalive's pace (and a
// few more) keeps its session.
func TestKeepAlivePingsPass(t *testing.T) {
	host, guest := socketPair(t)
	abuse := make(abuseRecorder, 1)
	sess, err := HostSession(host, abuse.record)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	go func() { _, _ = io.Copy(io.Discard, guest) }()
	for i := range PingBurst {
		if _, err := guest.Write(yamuxFrame(yamuxTypePing, yamuxFlagSYN, 0, uint32(i))); err != nil {
			t.Fatal(err)
		}
	}
	// A ping the host sends itself is answered and must get through.
	if _, err := guest.Write(yamuxFrame(yamuxTypePing, 2 /* ACK */, 0, 99)); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.OpenStream(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the reader take them all
	if sess.IsClosed() {
		t.Fatalf("session dropped: %v", <-abuse)
	}
}

// TestGuestOpenedStreamDropsSession: the host never accepts a stream, so
// one the guest opens would sit in yamux's backlog (256 of them, each with
// a 256 KiB window: ~64 MiB a session) until the session ends. The host
// drops the session at the first one instead.
func TestGuestOpenedStreamDropsSession(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"window update", yamuxFrame(yamuxTypeWindowUpdate, yamuxFlagSYN, 2, 0)},
		{"data", append(yamuxFrame(yamuxTypeData, yamuxFlagSYN, 2, 5), "hello"...)},
		{"odd id", yamuxFrame(yamuxTypeWindowUpdate, yamuxFlagSYN, 1, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, guest := socketPair(t)
			abuse := make(abuseRecorder, 1)
			sess, err := HostSession(host, abuse.record)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			go func() { _, _ = io.Copy(io.Discard, guest) }()
			if _, err := guest.Write(tc.frame); err != nil {
				t.Fatal(err)
			}
			if err := waitClosed(t, sess, abuse, 5*time.Second); !errors.Is(err, ErrLinkAbuse) {
				t.Fatalf("abuse reported: %v", err)
			}
		})
	}
}

// TestGuardFollowsFraming: a data frame's body that looks like a SYN or a
// ping is data, not a frame, wherever the reads split it.
func TestGuardFollowsFraming(t *testing.T) {
	body := yamuxFrame(yamuxTypeWindowUpdate, yamuxFlagSYN, 2, 0)
	for range 2 * PingBurst {
		body = append(body, yamuxFrame(yamuxTypePing, yamuxFlagSYN, 0, 1)...)
	}
	stream := append(yamuxFrame(yamuxTypeData, 0, 1, uint32(len(body))), body...)
	stream = append(stream, yamuxFrame(yamuxTypePing, 2, 0, 0)...)
	for split := 1; split <= len(stream); split++ {
		g := newGuardConn(nil, false, WriteTimeout, nil)
		for b := stream; len(b) > 0; {
			k := min(split, len(b))
			if err := g.check(b[:k]); err != nil {
				t.Fatalf("split %d: %v", split, err)
			}
			b = b[k:]
		}
		if g.hdrN != 0 || g.skip != 0 {
			t.Fatalf("split %d: ended mid-frame (%d header bytes, %d to skip)", split, g.hdrN, g.skip)
		}
	}
}

// TestStalledReaderDropsSession: a guest that stops reading blocks yamux's
// send loop in a write; yamux alone never noticed (its keepalive ping is
// answered by a guest that writes ACKs blindly, the ids are sequential).
// The write deadline ends the session.
func TestStalledReaderDropsSession(t *testing.T) {
	host, guest := socketPair(t)
	const timeout = 200 * time.Millisecond
	cfg := hostConfig()
	cfg.ConnectionWriteTimeout = timeout
	sess, err := yamux.Client(newFrameConn(newGuardConn(host, false, timeout, nil)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// The guest acknowledges the stream and grants a large window, then
	// never reads.
	go func() {
		_, _ = guest.Write(yamuxFrame(yamuxTypeWindowUpdate, 2 /* ACK */, 1, 64<<20))
	}()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 1<<20)
		for {
			if _, err := st.Write(buf); err != nil {
				return
			}
		}
	}()
	select {
	case <-sess.CloseChan():
	case <-time.After(20 * timeout):
		t.Fatalf("session still up %s after the guest stopped reading", 20*timeout)
	}
}
