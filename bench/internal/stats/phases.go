package stats

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Phases is a slog.Handler that passes every record on and, while active,
// turns the duration attributes of the records it watches (the worker's
// debug records "wake phases", "create phases", "agent link up") into
// Series named "<message> (<how>): <attribute>", so a bench can print
// medians of each phase.
type Phases struct {
	next   slog.Handler
	watch  map[string]bool
	active *atomic.Bool
	mu     *sync.Mutex
	series *[]*Series
	byName map[string]*Series
}

// NewPhases wraps next, watching records with the given messages.
func NewPhases(next slog.Handler, messages ...string) *Phases {
	p := &Phases{next: next, watch: map[string]bool{}, active: new(atomic.Bool),
		mu: new(sync.Mutex), series: new([]*Series), byName: map[string]*Series{}}
	for _, m := range messages {
		p.watch[m] = true
	}
	return p
}

// SetActive turns collecting on or off (records still pass on).
func (p *Phases) SetActive(on bool) { p.active.Store(on) }

// Series returns what was collected, in the order first seen.
func (p *Phases) Series() []Series {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Series, 0, len(*p.series))
	for _, s := range *p.series {
		out = append(out, *s)
	}
	return out
}

// Enabled implements slog.Handler: watched records are debug records, so
// the wrapper enables debug even when next does not.
func (p *Phases) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelDebug && (p.active.Load() || p.next.Enabled(ctx, l))
}

// Handle implements slog.Handler.
func (p *Phases) Handle(ctx context.Context, r slog.Record) error {
	if p.active.Load() && p.watch[r.Message] {
		p.collect(r)
	}
	if p.next.Enabled(ctx, r.Level) {
		return p.next.Handle(ctx, r)
	}
	return nil
}

func (p *Phases) collect(r slog.Record) {
	name := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "how" {
			name += " (" + a.Value.String() + ")"
		}
		return true
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() != slog.KindDuration {
			return true
		}
		key := name + ": " + a.Key
		s, ok := p.byName[key]
		if !ok {
			s = &Series{Name: key, Unit: "ms"}
			p.byName[key] = s
			*p.series = append(*p.series, s)
		}
		s.AddDuration(a.Value.Duration())
		return true
	})
}

// WithAttrs implements slog.Handler.
func (p *Phases) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *p
	c.next = p.next.WithAttrs(attrs)
	return &c
}

// WithGroup implements slog.Handler.
func (p *Phases) WithGroup(name string) slog.Handler {
	c := *p
	c.next = p.next.WithGroup(name)
	return &c
}
