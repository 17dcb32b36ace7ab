package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Verb is a worker call whose time and failures the simulation models.
type Verb string

// The verbs a Profile times.
const (
	VerbCreate     Verb = "create"
	VerbDelete     Verb = "delete"
	VerbPause      Verb = "pause"
	VerbResume     Verb = "resume"
	VerbSuspend    Verb = "suspend"
	VerbWake       Verb = "wake"
	VerbCheckpoint Verb = "checkpoint"
	VerbRestore    Verb = "restore"
)

// Verbs lists every Verb, in the order flags and docs show them.
var Verbs = []Verb{VerbCreate, VerbDelete, VerbPause, VerbResume, VerbSuspend, VerbWake, VerbCheckpoint, VerbRestore}

// Latency is a log-normal distribution of durations: Median is its
// median; Spread, when above 0, is roughly one standard deviation around
// it (the log-normal's sigma is Spread/Median), so about two thirds of the
// samples fall within Median ± Spread and the tail is long on the slow
// side, as real VM operations are.
type Latency struct {
	Median, Spread time.Duration
}

// String is the flag form: "MEDIAN" or "MEDIAN:SPREAD".
func (l Latency) String() string {
	if l.Spread == 0 {
		return l.Median.String()
	}
	return l.Median.String() + ":" + l.Spread.String()
}

// ParseLatency reads "MEDIAN" or "MEDIAN:SPREAD" (Go durations, e.g.
// "800ms:200ms").
func ParseLatency(s string) (Latency, error) {
	med, spread, hasSpread := strings.Cut(s, ":")
	var l Latency
	var err error
	if l.Median, err = time.ParseDuration(med); err != nil || l.Median < 0 {
		return Latency{}, fmt.Errorf("latency %q: want MEDIAN[:SPREAD] as durations, e.g. 800ms:200ms", s)
	}
	if hasSpread {
		if l.Spread, err = time.ParseDuration(spread); err != nil || l.Spread < 0 {
			return Latency{}, fmt.Errorf("latency %q: the spread %q is not a non-negative duration", s, spread)
		}
	}
	return l, nil
}

// Timing is how one verb behaves: how long it takes and how often it fails.
type Timing struct {
	Latency Latency
	// FailureRate is the probability, 0 to 1, that a call fails (after its
	// latency), leaving the sandbox as it was.
	FailureRate float64
}

// ParseFailureRate reads a probability between 0 and 1.
func ParseFailureRate(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 || math.IsNaN(f) {
		return 0, fmt.Errorf("failure rate %q: want a probability from 0 to 1", s)
	}
	return f, nil
}

// Profile is the simulated worker's behaviour: per-verb timings, the
// seed of its random numbers, and the bound on each guest's files.
type Profile struct {
	Timings map[Verb]Timing
	// Seed seeds the random numbers: one seed and one sequence of calls
	// give the same latencies and failures.
	Seed uint64
	// GuestDiskMiB bounds the bytes a guest's files hold when the spec
	// names no disk size (DefaultGuestDiskMiB when 0).
	GuestDiskMiB int
}

// DefaultGuestDiskMiB bounds a simulated guest's files unless the spec
// sets DiskMiB.
const DefaultGuestDiskMiB = 64

// DefaultProfile is what a KVM host with warm pools measures: creates
// restore a pooled VM (about 150 ms to an answering agent), suspends write
// and checksum a memory file, wakes restore one. No failures.
func DefaultProfile() Profile {
	ms := time.Millisecond
	return Profile{Seed: 1, Timings: map[Verb]Timing{
		VerbCreate:     {Latency: Latency{150 * ms, 50 * ms}},
		VerbDelete:     {Latency: Latency{30 * ms, 10 * ms}},
		VerbPause:      {Latency: Latency{5 * ms, 2 * ms}},
		VerbResume:     {Latency: Latency{5 * ms, 2 * ms}},
		VerbSuspend:    {Latency: Latency{400 * ms, 150 * ms}},
		VerbWake:       {Latency: Latency{150 * ms, 50 * ms}},
		VerbCheckpoint: {Latency: Latency{100 * ms, 30 * ms}},
		VerbRestore:    {Latency: Latency{200 * ms, 60 * ms}},
	}}
}

// dice draws latencies and failures from one seeded source.
type dice struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newDice(seed uint64) *dice {
	return &dice{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// draw returns one latency of t and whether the call fails.
func (d *dice) draw(t Timing) (time.Duration, bool) {
	d.mu.Lock()
	n, u := d.rng.NormFloat64(), d.rng.Float64()
	d.mu.Unlock()
	lat := t.Latency.Median
	if t.Latency.Spread > 0 && lat > 0 {
		sigma := float64(t.Latency.Spread) / float64(lat)
		lat = time.Duration(float64(lat) * math.Exp(sigma*n))
	}
	return lat, u < t.FailureRate
}
