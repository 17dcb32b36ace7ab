package tpllock_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker/local/tpllock"
)

func TestSharedExclusivePerDigest(t *testing.T) {
	var l tpllock.Locks
	r1 := l.Read("base", "d1")
	r2, ok := l.TryRead("other", "d1")
	if !ok {
		t.Fatal("TryRead refused while only readers hold d1")
	}
	if got := l.DigestsOf("base"); !slices.Equal(got, []string{"d1"}) {
		t.Fatalf("DigestsOf(base) = %v, want [d1]", got)
	}

	written, released := make(chan struct{}), make(chan struct{})
	go func() {
		unlock := l.Write("d1")
		close(written)
		unlock()
		close(released)
	}()
	// A writer waits: new readers of d1 are refused, other digests are not.
	testenv.Eventually(t, 5*time.Second, func() error {
		if u, ok := l.TryRead("base", "d1"); ok {
			u()
			return errors.New("TryRead of d1 admitted while a writer waits")
		}
		return nil
	})
	u, ok := l.TryRead("base", "d2")
	if !ok {
		t.Fatal("TryRead of d2 refused behind d1's writer")
	}
	u()
	select {
	case <-written:
		t.Fatal("Write held while readers hold d1")
	default:
	}
	r1()
	r1() // unlock runs once
	r2()
	select {
	case <-written:
	case <-time.After(10 * time.Second):
		t.Fatal("Write did not get d1 once its readers let go")
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if got := l.DigestsOf("base"); len(got) != 0 {
			return errors.New("DigestsOf(base) not empty after every holder let go")
		}
		return nil
	})
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not let go of d1")
	}
	u, ok = l.TryRead("base", "d1")
	if !ok {
		t.Fatal("TryRead refused after the writer let go")
	}
	u()
}
