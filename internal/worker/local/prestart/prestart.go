// Package prestart keeps things made ahead of the request that needs them:
// a pool of entries per target, filled in the background within a count
// per target and a memory budget, taken by the request path, discarded when
// they die idle, their target is forgotten or the pool closes.
//
// It owns the bookkeeping only (targets, ready entries, the budget, the
// back-off after a failed make, the filler goroutine). What an entry is
// (a restored VM, a VMM waiting for a snapshot), how it is made, whether it
// still lives and how it is thrown away are the owner's, given in Config;
// prestart touches no file, process or network itself.
package prestart

import (
	"context"
	"errors"
	"sync"
	"time"
)

// RetryAfter is how long a target whose make failed is left alone.
const RetryAfter = 30 * time.Second

// ErrGone is what Config.Make returns when the target went away before its
// entry was made: nothing is made, and nothing counts as a failure.
var ErrGone = errors.New("prestart: target gone")

// Config says what a pool's entries are. K names a target, T is what the
// owner knows of it, E is an entry.
type Config[K comparable, T, E any] struct {
	// Size is how many ready entries each target keeps.
	Size int
	// BudgetMiB bounds the memory of the ready entries and the one being
	// made (MemMiB of each one's target).
	BudgetMiB int
	// MaxTargets keeps only the most recently wanted targets when > 0; the
	// ready entries of the others are discarded.
	MaxTargets int
	// Settle is how long the filler waits after being poked before it
	// makes anything, so that the request that poked it finishes first.
	Settle time.Duration

	MemMiB func(T) int
	// Make makes an entry for target k. On error it leaves nothing behind.
	Make func(ctx context.Context, k K, t T) (E, error)
	// Dead reports whether a ready entry died while it waited.
	Dead func(E) bool
	// Discard stops and removes an entry that is not taken.
	Discard func(E)
	// Lock, when set, is held around a make; ok false counts as a failed
	// make (the target is retried after RetryAfter).
	Lock func(K, T) (unlock func(), ok bool)
	// Failed, when set, hears of a make that failed while the pool is open.
	Failed func(K, T, error)
}

// Stats counts a pool's entries: Ready to be taken now, Made and Taken
// since it started.
type Stats struct {
	Ready, Made, Taken int
}

type item[E any] struct {
	e   E
	mib int
}

// Pool is a pre-start pool; see the package comment. A nil *Pool is a pool
// that never has anything: every method is safe on it.
type Pool[K comparable, T, E any] struct {
	cfg Config[K, T, E]

	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	order   []K // most recently wanted first
	targets map[K]T
	ready   map[K][]item[E]
	usedMiB int // ready entries and the one being made
	failed  map[K]time.Time
	stats   Stats
}

// New starts a pool's filler; it runs until Close or Abandon (ctx's
// cancellation does not stop it: the pool outlives the call that made it).
func New[K comparable, T, E any](ctx context.Context, cfg Config[K, T, E]) *Pool[K, T, E] {
	p := &Pool[K, T, E]{
		cfg:  cfg,
		kick: make(chan struct{}, 1), done: make(chan struct{}),
		targets: map[K]T{}, ready: map[K][]item[E]{}, failed: map[K]time.Time{},
	}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go p.run()
	return p
}

// Want makes k (described by t) the most recently wanted target and
// reports whether it was new. With MaxTargets, targets that fall off the
// list are dropped and their ready entries discarded. It does not poke the
// filler.
func (p *Pool[K, T, E]) Want(k K, t T) (added bool) {
	if p == nil {
		return false
	}
	p.mu.Lock()
	_, known := p.targets[k]
	p.targets[k] = t
	kept := []K{k}
	var dropped []K
	for _, o := range p.order {
		if o == k {
			continue
		}
		if p.cfg.MaxTargets > 0 && len(kept) >= p.cfg.MaxTargets {
			dropped = append(dropped, o)
			continue
		}
		kept = append(kept, o)
	}
	p.order = kept
	var drop []item[E]
	for _, o := range dropped {
		delete(p.targets, o)
		delete(p.failed, o)
		drop = append(drop, p.unready(o)...)
	}
	p.mu.Unlock()
	for _, it := range drop {
		go p.cfg.Discard(it.e)
	}
	return !known
}

// Forget drops target k and discards its ready entries before it returns.
func (p *Pool[K, T, E]) Forget(k K) {
	if p == nil {
		return
	}
	p.mu.Lock()
	delete(p.targets, k)
	delete(p.failed, k)
	for i, o := range p.order {
		if o == k {
			p.order = append(p.order[:i:i], p.order[i+1:]...)
			break
		}
	}
	drop := p.unready(k)
	p.mu.Unlock()
	for _, it := range drop {
		p.cfg.Discard(it.e)
	}
}

// unready removes k's ready entries and returns them; p.mu held.
func (p *Pool[K, T, E]) unready(k K) []item[E] {
	its := p.ready[k]
	delete(p.ready, k)
	for _, it := range its {
		p.usedMiB -= it.mib
	}
	return its
}

// Take returns a ready entry of k, or false. Entries found dead are
// discarded on the way. It does not poke the filler.
func (p *Pool[K, T, E]) Take(k K) (E, bool) {
	var zero E
	if p == nil {
		return zero, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready[k]) > 0 {
		it := p.ready[k][0]
		p.ready[k] = p.ready[k][1:]
		p.usedMiB -= it.mib
		if p.cfg.Dead(it.e) {
			go p.cfg.Discard(it.e)
			continue
		}
		p.stats.Taken++
		return it.e, true
	}
	return zero, false
}

// Discard throws away an entry that was taken and is not used.
func (p *Pool[K, T, E]) Discard(e E) {
	if p != nil {
		p.cfg.Discard(e)
	}
}

// Poke has the filler make what is missing.
func (p *Pool[K, T, E]) Poke() {
	if p == nil {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Stats reports the pool's counts.
func (p *Pool[K, T, E]) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	for _, its := range p.ready {
		st.Ready += len(its)
	}
	return st
}

// Close stops the filler and discards every ready entry.
func (p *Pool[K, T, E]) Close() {
	if p != nil {
		p.Abandon(p.cfg.Discard)
	}
}

// Abandon stops the filler and hands every ready entry to let (instead of
// discarding it); the pool then holds nothing.
func (p *Pool[K, T, E]) Abandon(let func(E)) {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
	p.mu.Lock()
	var all []item[E]
	for k := range p.ready {
		all = append(all, p.unready(k)...)
	}
	p.usedMiB = 0
	p.mu.Unlock()
	for _, it := range all {
		let(it.e)
	}
}

// next picks a target short of entries and reserves its memory.
func (p *Pool[K, T, E]) next() (K, T, int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range p.order {
		t := p.targets[k]
		mib := p.cfg.MemMiB(t)
		if len(p.ready[k]) >= p.cfg.Size || p.usedMiB+mib > p.cfg.BudgetMiB {
			continue
		}
		if at, ok := p.failed[k]; ok && time.Since(at) < RetryAfter {
			continue
		}
		p.usedMiB += mib
		return k, t, mib, true
	}
	var k K
	var t T
	return k, t, 0, false
}

func (p *Pool[K, T, E]) run() {
	defer close(p.done)
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.kick:
		}
		if p.cfg.Settle > 0 {
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(p.cfg.Settle):
			}
		}
		for p.ctx.Err() == nil {
			k, t, mib, ok := p.next()
			if !ok {
				break
			}
			p.fill(k, t, mib)
		}
	}
}

// fill makes one entry of k, whose memory next reserved.
func (p *Pool[K, T, E]) fill(k K, t T, mib int) {
	unlock := func() {}
	if p.cfg.Lock != nil {
		u, ok := p.cfg.Lock(k, t)
		if !ok {
			p.mu.Lock()
			p.usedMiB -= mib
			p.failed[k] = time.Now()
			p.mu.Unlock()
			return
		}
		unlock = u
	}
	defer unlock()
	var e E
	err := ErrGone
	if p.wanted(k) {
		e, err = p.cfg.Make(p.ctx, k, t)
	}
	p.mu.Lock()
	_, wanted := p.targets[k]
	if err != nil || !wanted {
		p.usedMiB -= mib
		if err != nil && !errors.Is(err, ErrGone) {
			p.failed[k] = time.Now()
		}
		p.mu.Unlock()
		if err == nil {
			p.cfg.Discard(e)
		} else if !errors.Is(err, ErrGone) && p.cfg.Failed != nil && p.ctx.Err() == nil {
			p.cfg.Failed(k, t, err)
		}
		return
	}
	delete(p.failed, k)
	p.stats.Made++
	p.ready[k] = append(p.ready[k], item[E]{e: e, mib: mib})
	p.mu.Unlock()
}

func (p *Pool[K, T, E]) wanted(k K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.targets[k]
	return ok
}
