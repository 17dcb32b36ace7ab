// Package budget bounds what one sandbox's guest can make the host hold: a
// count of things in use at once (proxy connections, DNS queries in flight,
// link streams), per sandbox and per kind. A guest is hostile; every
// host-side reader of guest data takes a slot here before it allocates,
// waits or dials on the guest's behalf, and gives it back when done.
//
// The budgets are counted here and nowhere else, so docs/security.md ("Per-
// sandbox budgets on the host") and the metrics name the same things. It
// knows nothing of what a slot stands for: egress, DNS and the agent link
// name their kinds and choose their limits.
package budget

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind names one budget, the label value of its metrics.
type Kind string

// Set is the budgets of many sandboxes for one kind of slot, with the
// kind's limit per sandbox. The zero value is not usable; make one with New.
// A nil *Set grants every slot (no budget configured).
type Set struct {
	kind  Kind
	limit int

	mu    sync.Mutex
	inUse map[string]int // sandbox id → slots held

	held      prometheus.Gauge
	exhausted prometheus.Counter
}

// Metrics are the series every Set of one registry shares, labelled by kind.
type Metrics struct {
	held      *prometheus.GaugeVec
	exhausted *prometheus.CounterVec
}

// NewMetrics registers the budget series on reg; a nil reg gives metrics
// that count but are served nowhere.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "space", Subsystem: "guest_budget", Name: "in_use",
			Help: "Slots of a per-sandbox host budget held now, summed over sandboxes, by budget.",
		}, []string{"budget"}),
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "space", Subsystem: "guest_budget", Name: "exhausted_total",
			Help: "Requests a sandbox's guest made past its per-sandbox host budget (refused or throttled), by budget.",
		}, []string{"budget"}),
	}
	if reg != nil {
		reg.MustRegister(m.held, m.exhausted)
	}
	return m
}

// New makes the budget of kind, limit slots per sandbox, counted in m (nil:
// counted nowhere).
func New(kind Kind, limit int, m *Metrics) *Set {
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Set{
		kind: kind, limit: limit, inUse: map[string]int{},
		held:      m.held.WithLabelValues(string(kind)),
		exhausted: m.exhausted.WithLabelValues(string(kind)),
	}
}

// Kind is the budget's name.
func (s *Set) Kind() Kind { return s.kind }

// Limit is the slots one sandbox may hold at once.
func (s *Set) Limit() int {
	if s == nil {
		return 0
	}
	return s.limit
}

// TryAcquire takes one of sandbox's slots. It returns a release func (safe
// to call more than once) and true, or nil and false when sandbox already
// holds its limit; the refusal is counted.
func (s *Set) TryAcquire(sandbox string) (release func(), ok bool) {
	if s == nil {
		return func() {}, true
	}
	s.mu.Lock()
	if s.inUse[sandbox] >= s.limit {
		s.mu.Unlock()
		s.exhausted.Inc()
		return nil, false
	}
	s.inUse[sandbox]++
	s.mu.Unlock()
	s.held.Inc()
	var once sync.Once
	return func() { once.Do(func() { s.release(sandbox) }) }, true
}

func (s *Set) release(sandbox string) {
	s.mu.Lock()
	if s.inUse[sandbox]--; s.inUse[sandbox] <= 0 {
		delete(s.inUse, sandbox)
	}
	s.mu.Unlock()
	s.held.Dec()
}

// InUse is how many slots sandbox holds now.
func (s *Set) InUse(sandbox string) int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inUse[sandbox]
}

// Exhausted counts a request past the budget that the caller throttled or
// refused by a means of its own (a rate, not a count of slots).
func (s *Set) Exhausted() {
	if s != nil {
		s.exhausted.Inc()
	}
}
