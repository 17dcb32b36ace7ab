package agent

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestVsockListener: the listener binds, and both Close and the end of
// the serving context end a blocked accept (no host can connect from
// here: guest-to-self vsock needs the vsock_loopback transport, which
// hosts running these tests need not have; the link itself is checked
// end to end by the Firecracker driver's conformance run on a KVM host).
func TestVsockListener(t *testing.T) {
	l, err := ListenVsock(52000)
	if err != nil {
		t.Logf("no AF_VSOCK on this host (%v): the listener cannot be exercised here", err)
		return
	}
	errc := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let Accept block
	l.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Accept after Close returned a connection")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocked Accept")
	}

	a := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.ServeVsock(ctx, 52001) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ServeVsock after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeVsock did not return after its context ended")
	}
	t.Logf("this VM has a virtio vsock device: %v", HasVsockDevice())
}
