package egress

import (
	"sync"
	"time"
)

// Record is one audit entry: a connection, HTTP request or DNS query the
// guest attempted, and what the policy made of it.
type Record struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	// Kind is "http", "https" (a request inside an intercepted TLS
	// connection), "tls", "tcp" or "dns".
	Kind string `json:"kind"`
	// Destination is what the guest asked for: a name (with port) when it
	// gave one, the address it dialled otherwise.
	Destination string `json:"destination"`
	// Upstream is the address the platform connected to, if any.
	Upstream string `json:"upstream,omitempty"`
	Allowed  bool   `json:"allowed"`
	// Rule is the policy entry that decided ("allow pypi.org",
	// "default deny") or the guard that refused, whatever the policy says:
	// "forbidden address" (this host, loopback, the operator's deny list…)
	// or "private address" (a private range the operator has not allowed).
	Rule string `json:"rule"`
	// BytesOut went from the guest to the upstream, BytesIn came back.
	BytesOut int64 `json:"bytes_out"`
	BytesIn  int64 `json:"bytes_in"`
	// Injected lists header names the proxy set (never their values).
	Injected []string `json:"injected,omitempty"`
}

// ring keeps the last n records of one sandbox.
type ring struct {
	mu   sync.Mutex
	buf  []*Record
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]*Record, n)} }

// add stores rec and returns it for update (bytes of an open connection).
func (r *ring) add(rec Record) *Record {
	p := &rec
	r.mu.Lock()
	r.buf[r.next] = p
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
	r.mu.Unlock()
	return p
}

// update sets the byte counts of a stored record.
func (r *ring) update(p *Record, out, in int64) {
	r.mu.Lock()
	p.BytesOut, p.BytesIn = out, in
	r.mu.Unlock()
}

func (r *ring) snapshot() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Record, 0, len(r.buf))
	if r.full {
		for _, p := range r.buf[r.next:] {
			out = append(out, *p)
		}
	}
	for _, p := range r.buf[:r.next] {
		out = append(out, *p)
	}
	return out
}
