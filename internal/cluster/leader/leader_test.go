package leader_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/cluster/leader"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kuberig.StopShared(code != 0)
	os.Exit(code)
}

// leadership records who leads, and fails if two ever lead at once.
type leadership struct {
	mu      sync.Mutex
	current string
	history []string
	overlap string
	changed chan struct{}
}

func (l *leadership) run(identity string) func(ctx context.Context) {
	return func(ctx context.Context) {
		l.mu.Lock()
		if l.current != "" {
			l.overlap = l.current + " and " + identity
		}
		l.current = identity
		l.history = append(l.history, identity)
		l.mu.Unlock()
		l.changed <- struct{}{}
		<-ctx.Done() // a singleton loop runs until leadership ends
		l.mu.Lock()
		l.current = ""
		l.mu.Unlock()
	}
}

func (l *leadership) waitLeader(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case <-l.changed:
	case <-time.After(d):
		t.Fatalf("nobody leads within %s", d)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current
}

// TestRunAsLeader: of two candidates one leads; when it stops the other
// takes over; never both at once.
func TestRunAsLeader(t *testing.T) {
	c := kuberig.Shared(t, kuberig.Options{})
	l := &leadership{changed: make(chan struct{}, 4)}
	type candidate struct {
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id string) candidate {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- leader.RunAsLeader(ctx, leader.Config{Client: c.Client, Namespace: "default", Name: "space-singletons",
				Identity: id, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}, l.run(id))
		}()
		return candidate{cancel, done}
	}
	stop := func(cd candidate) {
		cd.cancel()
		select {
		case err := <-cd.done:
			if err != nil {
				t.Errorf("RunAsLeader: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("RunAsLeader did not return 20s after its context ended")
		}
	}
	cands := map[string]candidate{"replica-a": start("replica-a"), "replica-b": start("replica-b")}
	first := l.waitLeader(t, 30*time.Second)
	if _, ok := cands[first]; !ok {
		t.Fatalf("leader %q", first)
	}
	other := "replica-a"
	if first == other {
		other = "replica-b"
	}
	stop(cands[first])
	if got := l.waitLeader(t, 30*time.Second); got != other {
		t.Fatalf("after %s stopped, %q leads; want %s", first, got, other)
	}
	stop(cands[other])
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.overlap != "" {
		t.Errorf("two leaders at once: %s", l.overlap)
	}
	if len(l.history) != 2 {
		t.Errorf("leadership history %v, want two terms", l.history)
	}
}

func TestRunAsLeaderRefusesBadConfig(t *testing.T) {
	err := leader.RunAsLeader(context.Background(), leader.Config{Name: "x"}, func(context.Context) {})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad config: %v, want invalid_argument", err)
	}
}
