package local

import (
	"log/slog"
	"time"
)

// phases times the steps of one create or wake for a debug log record
// (bench/snapshots -v turns the records into a table). Its methods do
// nothing on a nil *phases, so code paths that are not timed pass nil.
type phases struct {
	start, last time.Time
	attrs       []any
}

func startPhases() *phases {
	now := time.Now()
	return &phases{start: now, last: now}
}

// mark records the time since the previous mark (or the start) as name.
func (p *phases) mark(name string) {
	if p == nil {
		return
	}
	now := time.Now()
	p.attrs = append(p.attrs, name, now.Sub(p.last))
	p.last = now
}

// add records d as name without moving the sequence (a step that ran in
// parallel with the others).
func (p *phases) add(name string, d time.Duration) {
	if p == nil {
		return
	}
	p.attrs = append(p.attrs, name, d)
}

// log writes the phases and their total as one debug record, after the
// given leading attributes.
func (p *phases) log(l *slog.Logger, msg string, attrs ...any) {
	if p == nil {
		return
	}
	attrs = append(attrs, p.attrs...)
	l.Debug(msg, append(attrs, "total", time.Since(p.start))...)
}
