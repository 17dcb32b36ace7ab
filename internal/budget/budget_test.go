package budget

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSetBoundsEachSandbox(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	s := New("egress_connections", 2, m)

	r1, ok1 := s.TryAcquire("a")
	r2, ok2 := s.TryAcquire("a")
	_, ok3 := s.TryAcquire("a")
	rb, okb := s.TryAcquire("b")
	if !ok1 || !ok2 || ok3 || !okb {
		t.Fatalf("acquire a,a,a,b = %v %v %v %v; want true true false true", ok1, ok2, ok3, okb)
	}
	if got := testutil.ToFloat64(m.held.WithLabelValues("egress_connections")); got != 3 {
		t.Errorf("in_use = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.exhausted.WithLabelValues("egress_connections")); got != 1 {
		t.Errorf("exhausted = %v, want 1", got)
	}
	r1()
	r1() // a second release is a no-op
	if _, ok := s.TryAcquire("a"); !ok {
		t.Error("a slot released is not free again")
	}
	if got := s.InUse("a"); got != 2 {
		t.Errorf("InUse(a) = %d, want 2", got)
	}
	r2()
	rb()
	if got := s.InUse("b"); got != 0 {
		t.Errorf("InUse(b) = %d after release, want 0", got)
	}
}

func TestNilSetGrantsEverything(t *testing.T) {
	var s *Set
	release, ok := s.TryAcquire("x")
	if !ok {
		t.Fatal("a nil Set refused")
	}
	release()
	s.Exhausted()
}

func TestSetConcurrent(t *testing.T) {
	s := New("link_streams", 5, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := 0
	maxHeld := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, ok := s.TryAcquire("a")
			if !ok {
				return
			}
			mu.Lock()
			held++
			maxHeld = max(maxHeld, held)
			mu.Unlock()
			mu.Lock()
			held--
			mu.Unlock()
			release()
		}()
	}
	wg.Wait()
	if maxHeld > 5 {
		t.Errorf("%d slots held at once, limit 5", maxHeld)
	}
	if s.InUse("a") != 0 {
		t.Errorf("InUse = %d after all released", s.InUse("a"))
	}
}
