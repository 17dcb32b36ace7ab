package prestart_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker/local/prestart"
)

// entry is a fake pre-started thing.
type entry struct {
	key       string
	dead      atomic.Bool
	discarded atomic.Bool
}

type fake struct {
	mu        sync.Mutex
	made      int
	discarded []*entry
	fail      map[string]error
	live      map[*entry]bool
}

func newFake() *fake { return &fake{fail: map[string]error{}, live: map[*entry]bool{}} }

func (f *fake) config(size, budget int) prestart.Config[string, int, *entry] {
	return prestart.Config[string, int, *entry]{
		Size: size, BudgetMiB: budget,
		MemMiB: func(mib int) int { return mib },
		Make: func(_ context.Context, k string, _ int) (*entry, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if err := f.fail[k]; err != nil {
				return nil, err
			}
			f.made++
			e := &entry{key: k}
			f.live[e] = true
			return e, nil
		},
		Dead: func(e *entry) bool { return e.dead.Load() },
		Discard: func(e *entry) {
			e.discarded.Store(true)
			f.mu.Lock()
			defer f.mu.Unlock()
			delete(f.live, e)
			f.discarded = append(f.discarded, e)
		},
	}
}

func (f *fake) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() error {
		if !cond() {
			return errors.New("not yet: " + what)
		}
		return nil
	})
}

func waitReady(t *testing.T, p *prestart.Pool[string, int, *entry], n int) {
	t.Helper()
	eventually(t, func() bool { return p.Stats().Ready == n }, "ready entries")
}

func TestFillsEachTargetToSizeWithinBudget(t *testing.T) {
	tests := []struct {
		name          string
		size, budget  int
		targets       map[string]int
		ready, stable int
	}{
		{name: "size bounds", size: 2, budget: 1000, targets: map[string]int{"a": 10, "b": 10}, ready: 4},
		{name: "budget bounds", size: 3, budget: 25, targets: map[string]int{"a": 10}, ready: 2},
		{name: "target larger than budget", size: 1, budget: 5, targets: map[string]int{"a": 10}, ready: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			p := prestart.New(context.Background(), f.config(tt.size, tt.budget))
			t.Cleanup(p.Close)
			for k, mib := range tt.targets {
				p.Want(k, mib)
			}
			p.Poke()
			waitReady(t, p, tt.ready)
			p.Poke() // nothing more is made
			waitReady(t, p, tt.ready)
			if st := p.Stats(); st.Made != tt.ready {
				t.Fatalf("made %d, want %d", st.Made, tt.ready)
			}
		})
	}
}

func TestTakeSkipsDeadAndCounts(t *testing.T) {
	f := newFake()
	p := prestart.New(context.Background(), f.config(2, 100))
	t.Cleanup(p.Close)
	if !p.Want("a", 1) || p.Want("a", 1) {
		t.Fatal("Want: new the first time only")
	}
	p.Poke()
	waitReady(t, p, 2)
	first, ok := p.Take("a")
	if !ok {
		t.Fatal("no entry")
	}
	first.dead.Store(true) // taken: the pool no longer minds it
	second, _ := p.Take("a")
	second.dead.Store(true)
	p.Poke()
	waitReady(t, p, 2)
	// Both ready entries die; a take discards them and finds nothing.
	for _, e := range p.Peek("a") {
		e.dead.Store(true)
	}
	if _, ok := p.Take("a"); ok {
		t.Fatal("took a dead entry")
	}
	eventually(t, func() bool { return f.liveCount() == 2 }, "dead entries discarded")
	if st := p.Stats(); st.Taken != 2 || st.Made != 4 || st.Ready != 0 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok := p.Take("unknown"); ok {
		t.Fatal("took an entry of no target")
	}
}

func TestFailedTargetBacksOff(t *testing.T) {
	f := newFake()
	f.fail["bad"] = errors.New("boom")
	var failed atomic.Int32
	cfg := f.config(1, 100)
	cfg.Failed = func(string, int, error) { failed.Add(1) }
	p := prestart.New(context.Background(), cfg)
	t.Cleanup(p.Close)
	p.Want("bad", 1)
	p.Want("good", 1)
	p.Poke()
	waitReady(t, p, 1)
	p.Poke()
	p.Poke()
	waitReady(t, p, 1)
	if n := failed.Load(); n != 1 {
		t.Fatalf("failed %d times, want 1 (then left alone)", n)
	}
}

func TestGoneIsNoFailure(t *testing.T) {
	f := newFake()
	f.fail["a"] = prestart.ErrGone
	var failed atomic.Int32
	cfg := f.config(1, 100)
	cfg.Failed = func(string, int, error) { failed.Add(1) }
	p := prestart.New(context.Background(), cfg)
	t.Cleanup(p.Close)
	p.Want("a", 1)
	p.Poke()
	eventually(t, func() bool { return p.Stats() == prestart.Stats{} }, "nothing made")
	if failed.Load() != 0 {
		t.Fatal("ErrGone reported as a failure")
	}
}

func TestLockRefusedCountsAsFailure(t *testing.T) {
	f := newFake()
	cfg := f.config(1, 100)
	var locks, unlocks atomic.Int32
	cfg.Lock = func(k string, _ int) (func(), bool) {
		locks.Add(1)
		if k == "locked" {
			return nil, false
		}
		return func() { unlocks.Add(1) }, true
	}
	p := prestart.New(context.Background(), cfg)
	t.Cleanup(p.Close)
	p.Want("locked", 1)
	p.Want("open", 1)
	p.Poke()
	waitReady(t, p, 1)
	p.Poke()
	waitReady(t, p, 1)
	if l, u := locks.Load(), unlocks.Load(); l != 2 || u != 1 {
		t.Fatalf("locks %d unlocks %d, want 2 and 1 (the refused target retried only after RetryAfter)", l, u)
	}
}

func TestMaxTargetsDropsOldest(t *testing.T) {
	f := newFake()
	cfg := f.config(1, 100)
	cfg.MaxTargets = 2
	p := prestart.New(context.Background(), cfg)
	t.Cleanup(p.Close)
	p.Want("a", 1)
	p.Want("b", 1)
	p.Poke()
	waitReady(t, p, 2)
	p.Want("a", 1) // a is the most recent again: c pushes b out
	p.Want("c", 1)
	p.Poke()
	eventually(t, func() bool {
		return len(p.Peek("b")) == 0 && len(p.Peek("a")) == 1 && len(p.Peek("c")) == 1
	}, "b dropped, a and c kept")
	eventually(t, func() bool { return f.liveCount() == 2 }, "b's entry discarded")
}

func TestForgetDiscardsAtOnce(t *testing.T) {
	f := newFake()
	p := prestart.New(context.Background(), f.config(2, 100))
	t.Cleanup(p.Close)
	p.Want("a", 1)
	p.Want("b", 1)
	p.Poke()
	waitReady(t, p, 4)
	p.Forget("a")
	if n := f.liveCount(); n != 2 {
		t.Fatalf("%d live after Forget, want 2 (discarded before it returns)", n)
	}
	p.Poke()
	waitReady(t, p, 2)
	if st := p.Stats(); st.Made != 4 {
		t.Fatalf("made %d after forget, want 4: a forgotten target is not refilled", st.Made)
	}
}

func TestCloseAndAbandon(t *testing.T) {
	for _, abandon := range []bool{false, true} {
		f := newFake()
		p := prestart.New(context.Background(), f.config(2, 100))
		p.Want("a", 1)
		p.Poke()
		waitReady(t, p, 2)
		var let int
		if abandon {
			p.Abandon(func(*entry) { let++ })
		} else {
			p.Close()
		}
		if st := p.Stats(); st.Ready != 0 {
			t.Fatalf("abandon=%v: %d ready after", abandon, st.Ready)
		}
		if abandon && (let != 2 || f.liveCount() != 2) {
			t.Fatalf("abandon: let %d, live %d; want 2 handed over, none discarded", let, f.liveCount())
		}
		if !abandon && f.liveCount() != 0 {
			t.Fatalf("close: %d live after", f.liveCount())
		}
		p.Poke() // the filler is gone: no panic, nothing made
	}
}

func TestNilPool(t *testing.T) {
	var p *prestart.Pool[string, int, *entry]
	p.Want("a", 1)
	p.Poke()
	p.Forget("a")
	p.Close()
	if _, ok := p.Take("a"); ok || p.Stats() != (prestart.Stats{}) {
		t.Fatal("a nil pool has something")
	}
}

// TestConcurrentUse is for -race: takes, wants, forgets and pokes at once.
func TestConcurrentUse(t *testing.T) {
	f := newFake()
	cfg := f.config(2, 40)
	cfg.MaxTargets = 3
	p := prestart.New(context.Background(), cfg)
	keys := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := keys[(g+i)%len(keys)]
				switch i % 4 {
				case 0:
					p.Want(k, 5)
					p.Poke()
				case 1:
					if e, ok := p.Take(k); ok {
						p.Discard(e)
					}
				case 2:
					_ = p.Stats()
				case 3:
					if i%40 == 3 {
						p.Forget(k)
					}
				}
			}
		}()
	}
	wg.Wait()
	p.Close()
	eventually(t, func() bool { return f.liveCount() == 0 }, "everything discarded")
}
