package agentclient_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/errdefs"
)

// silentPeer returns a dial function whose connections reach a peer that
// reads everything and never answers the handshake, as a hostile guest
// may; it closes their peers at the end of the test.
func silentPeer(t *testing.T) func() (net.Conn, error) {
	var mu sync.Mutex
	var peers []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range peers {
			p.Close()
		}
	})
	return func() (net.Conn, error) {
		host, guest := net.Pipe()
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, err := guest.Read(buf); err != nil {
					return
				}
			}
		}()
		mu.Lock()
		peers = append(peers, guest)
		mu.Unlock()
		return host, nil
	}
}

// TestCloseDuringDialDoesNotDeadlock is the lock order of a worker's
// sandbox: its dial function takes the sandbox's lock (to read its VM),
// and releasing the sandbox closes the client under that lock. A client
// that dialled under its own lock deadlocked the two: the dial waited for
// the sandbox's lock, which waited in Close for the client's (and the
// worker's Close, which releases every sandbox, froze).
func TestCloseDuringDialDoesNotDeadlock(t *testing.T) {
	var sbMu sync.Mutex // the sandbox's lock
	inDial := make(chan struct{}, 1)
	peer := silentPeer(t)
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		select {
		case inDial <- struct{}{}:
		default:
		}
		sbMu.Lock() // blocks until release is done
		sbMu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return peer()
	}, nil)
	c.SetTimeouts(agentclient.Timeouts{Connect: 3 * time.Second})

	sbMu.Lock() // release begins: it holds the sandbox's lock...
	callDone := make(chan error, 1)
	go func() { callDone <- ping(c, context.Background()) }()
	select {
	case <-inDial:
	case <-time.After(10 * time.Second):
		sbMu.Unlock()
		t.Fatal("the call never dialled")
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }() // ...and closes the client under it
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		sbMu.Unlock()
		<-callDone
		t.Fatal("Close did not return while a dial waited for the sandbox's lock: deadlock")
	}
	sbMu.Unlock()
	select {
	case err := <-callDone:
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("the call that was dialling: %v, want unavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call that was dialling did not end after Close")
	}
}

// TestCloseDoesNotWaitForHandshake: a guest that never answers the sync
// handshake must not hold up Close (a worker's shutdown) for the Connect
// bound; the call that was connecting fails at once.
func TestCloseDoesNotWaitForHandshake(t *testing.T) {
	peer := silentPeer(t)
	inDial := make(chan struct{}, 1)
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		select {
		case inDial <- struct{}{}:
		default:
		}
		return peer()
	}, nil)
	c.SetTimeouts(agentclient.Timeouts{Connect: time.Minute})
	callDone := make(chan error, 1)
	go func() { callDone <- ping(c, context.Background()) }()
	<-inDial
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited for a handshake the guest never answers")
	}
	select {
	case err := <-callDone:
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("the call that was connecting: %v, want unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call that was connecting did not end after Close")
	}
}

// TestConcurrentCallsShareOneDial: calls that arrive while a dial is in
// progress wait for it (one connection), and a waiting call whose own
// context ends returns at once instead of waiting for the dial.
func TestConcurrentCallsShareOneDial(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	dials := 0
	inDial := make(chan struct{}, 1)
	gated := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		mu.Lock()
		dials++
		mu.Unlock()
		select {
		case inDial <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return e.dial(ctx)
	}, nil)
	dialCount := func() int { mu.Lock(); defer mu.Unlock(); return dials }
	t.Cleanup(func() { once.Do(func() { close(release) }); gated.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- ping(gated, context.Background()) }()
	<-inDial
	waiter := make(chan error, 1)
	go func() { waiter <- ping(gated, ctx) }()
	cancel()
	select {
	case err := <-waiter:
		if !errors.Is(err, errdefs.ErrCancelled) {
			t.Fatalf("cancelled waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled call waited for another call's dial")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ping(gated, context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	once.Do(func() { close(release) })
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := dialCount(); n != 1 {
		t.Fatalf("%d dials for concurrent calls on one link, want 1", n)
	}
}

func ping(c *agentclient.Client, ctx context.Context) error {
	_, err := c.Ping(ctx)
	return err
}
