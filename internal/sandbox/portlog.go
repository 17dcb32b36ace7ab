package sandbox

import (
	"context"
	"sync"
	"time"
)

// PortConnection is one entry of a sandbox's port audit log: a request
// (or upgraded connection) that reached, or tried to reach, a guest port.
type PortConnection struct {
	Sandbox string
	Port    uint16
	// Tenant owns the sandbox; Via says what let the caller in: "key:ID"
	// (the owner's API key), "token:ID" (a port URL's or the traffic
	// token), "public:ID" (a public URL).
	Tenant string
	Via    string
	// Remote is the client's address as the listener saw it.
	Remote  string
	Started time.Time
	Ended   time.Time
	// BytesIn came from the guest, BytesOut went to it.
	BytesIn, BytesOut int64
	// Status is the HTTP status the client got (101 for an upgrade).
	Status int
}

// portLogSize is how many connections the log keeps per sandbox (the
// newest; older ones are dropped). portLogSandboxes bounds how many
// sandboxes it keeps logs for; the least recently written goes first.
const (
	portLogSize      = 256
	portLogSandboxes = 4096
)

// portLog is every sandbox's recent port connections, in this process's
// memory (like the egress log on its worker): in cluster mode each control
// replica has the connections it proxied.
type portLog struct {
	mu   sync.Mutex
	logs map[string]*portRing
	tick uint64
}

type portRing struct {
	recs  []PortConnection // oldest first, at most portLogSize
	wrote uint64
}

func (l *portLog) add(rec PortConnection) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.logs == nil {
		l.logs = map[string]*portRing{}
	}
	r := l.logs[rec.Sandbox]
	if r == nil {
		if len(l.logs) >= portLogSandboxes {
			l.evictOldest()
		}
		r = &portRing{}
		l.logs[rec.Sandbox] = r
	}
	if len(r.recs) == portLogSize {
		r.recs = append(r.recs[:0], r.recs[1:]...)
	}
	r.recs = append(r.recs, rec)
	l.tick++
	r.wrote = l.tick
}

func (l *portLog) evictOldest() {
	var oldest string
	var at uint64
	for id, r := range l.logs {
		if oldest == "" || r.wrote < at {
			oldest, at = id, r.wrote
		}
	}
	delete(l.logs, oldest)
}

func (l *portLog) list(sandboxID string) []PortConnection {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.logs[sandboxID]
	if r == nil {
		return []PortConnection{}
	}
	return append([]PortConnection(nil), r.recs...)
}

func (l *portLog) forget(sandboxID string) {
	l.mu.Lock()
	delete(l.logs, sandboxID)
	l.mu.Unlock()
}

// RecordPortConnection adds rec to its sandbox's port audit log and logs
// it. The edge that proxied the connection calls it when it ends.
func (s *Service) RecordPortConnection(ctx context.Context, rec PortConnection) {
	s.portLog.add(rec)
	s.logger.Info("port connection", "sandbox", rec.Sandbox, "port", rec.Port, "tenant", rec.Tenant, "via", rec.Via,
		"remote", rec.Remote, "status", rec.Status, "bytes_in", rec.BytesIn, "bytes_out", rec.BytesOut,
		"duration", rec.Ended.Sub(rec.Started), "request", s.requestID(ctx))
}

// PortConnections is tenant's sandbox's port audit log, oldest first: the
// last portLogSize connections this process proxied.
func (s *Service) PortConnections(ctx context.Context, tenant, sandboxID string) ([]PortConnection, error) {
	sb, err := s.portSandbox(ctx, tenant, sandboxID)
	if err != nil {
		return nil, err
	}
	return s.portLog.list(sb.ID), nil
}
