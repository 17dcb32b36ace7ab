package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/store"
)

// Build logs live in one file per build operation (<LogDir>/<op id>.log),
// so they can be read after the build and after a restart. While a build
// runs, readers follow the file and are woken by each write.

const (
	// maxBuildLog caps one build's log; the rest is dropped with a note.
	maxBuildLog = 32 << 20
	// maxLogLine splits lines longer than this into several events.
	maxLogLine = 16 << 10
)

// buildLogs is the set of build logs being written by this process.
type buildLogs struct {
	dir  string
	mu   sync.Mutex
	live map[string]*buildLog
}

// buildLog is one build's log file while the build runs. It is an
// io.Writer for template.Builder.
type buildLog struct {
	mu        sync.Mutex
	f         *os.File
	size      int64
	done      bool
	truncated bool
	changed   chan struct{} // closed and replaced on every write and at close
}

func (bl *buildLogs) path(opID string) string { return filepath.Join(bl.dir, opID+".log") }

// open creates the log of a build operation and makes it live.
func (bl *buildLogs) open(opID string) (*buildLog, error) {
	if err := os.MkdirAll(bl.dir, 0o700); err != nil {
		return nil, fmt.Errorf("build log dir: %w", err)
	}
	f, err := os.OpenFile(bl.path(opID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open build log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat build log: %w", err)
	}
	l := &buildLog{f: f, size: fi.Size(), changed: make(chan struct{})}
	bl.mu.Lock()
	if bl.live == nil {
		bl.live = map[string]*buildLog{}
	}
	bl.live[opID] = l
	bl.mu.Unlock()
	return l, nil
}

// get returns the live log of a build (nil when it is not being written).
func (bl *buildLogs) get(opID string) *buildLog {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	return bl.live[opID]
}

// finish closes a build's log: readers drain it and end.
func (bl *buildLogs) finish(opID string) {
	bl.mu.Lock()
	l := bl.live[opID]
	delete(bl.live, opID)
	bl.mu.Unlock()
	if l != nil {
		l.close()
	}
}

// buildLogMaxAge is how long a build's log is kept when its build is not
// deleted first (ReconcileTemplates prunes older ones at start).
const buildLogMaxAge = 30 * 24 * time.Hour

// remove deletes the log of a build operation unless it is being written.
func (bl *buildLogs) remove(opID string) error {
	if bl.get(opID) != nil {
		return nil
	}
	if err := os.Remove(bl.path(opID)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// prune removes the logs not written to since before cutoff (none being
// written) and returns how many it removed.
func (bl *buildLogs) prune(cutoff time.Time) (int, error) {
	ents, err := os.ReadDir(bl.dir)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list build logs: %w", err)
	}
	n := 0
	for _, e := range ents {
		opID, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			continue
		}
		if err := bl.remove(opID); err != nil {
			return n, fmt.Errorf("remove build log: %w", err)
		}
		n++
	}
	return n, nil
}

// discard removes the log of a build that was never submitted.
func (bl *buildLogs) discard(opID string) {
	bl.finish(opID)
	os.Remove(bl.path(opID))
}

func (l *buildLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done || l.truncated {
		return len(p), nil
	}
	w := p
	if l.size+int64(len(w)) > maxBuildLog {
		w = []byte("\n[the build log is truncated here: it exceeded 32 MiB]\n")
		l.truncated = true
	}
	n, err := l.f.Write(w)
	l.size += int64(n)
	l.wake()
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Printf writes one line of the control plane's own to the log.
func (l *buildLog) Printf(format string, args ...any) {
	fmt.Fprintf(l, format+"\n", args...)
}

func (l *buildLog) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *buildLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	l.f.Close()
	l.wake()
}

// state returns how much of the file is written, whether the build is done
// and a channel closed at the next change.
func (l *buildLog) state() (int64, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size, l.done, l.changed
}

// logReader turns a log file into numbered line events.
type logReader struct {
	f       *os.File
	off     int64
	partial []byte
	seq     uint64 // seq of the last line produced
	after   uint64
}

// read emits the complete lines in the file up to size; with final, the
// last partial line too.
func (lr *logReader) read(size int64, final bool, emit func(apiv1.BuildLogEvent) error) error {
	if size > lr.off {
		buf := make([]byte, size-lr.off)
		n, err := lr.f.ReadAt(buf, lr.off)
		if err != nil && err != io.EOF {
			return err
		}
		lr.off += int64(n)
		lr.partial = append(lr.partial, buf[:n]...)
	}
	for {
		i := bytes.IndexByte(lr.partial, '\n')
		if i < 0 && len(lr.partial) < maxLogLine && !(final && len(lr.partial) > 0) {
			return nil
		}
		end := i + 1
		if i < 0 || end > maxLogLine {
			end = min(len(lr.partial), maxLogLine)
		}
		line := lr.partial[:end]
		lr.seq++
		if lr.seq > lr.after {
			ev := apiv1.BuildLogEvent{Seq: lr.seq, Type: apiv1.BuildLogLine}
			if utf8.Valid(line) {
				s := string(line)
				ev.Data = &s
			} else {
				ev.DataB64 = append([]byte(nil), line...)
			}
			if err := emit(ev); err != nil {
				return err
			}
		}
		lr.partial = lr.partial[end:]
		if len(lr.partial) == 0 {
			lr.partial = nil
			return nil
		}
	}
}

// streamBuildLog writes a build's log lines with seq > after, following the
// log while the build runs, and ends with an "end" event carrying the
// operation's terminal state.
func (s *Server) streamBuildLog(w http.ResponseWriter, r *http.Request, op *store.Operation, after uint64) error {
	ctx := r.Context()
	live := s.buildLogs.get(op.ID)
	f, err := os.Open(s.buildLogs.path(op.ID))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("open build log: %w", err)
	}
	ew := newEventWriter(w, r)
	emit := func(ev apiv1.BuildLogEvent) error { return ew.json(ev, ev.Seq) }
	lr := &logReader{f: f, after: after}
	if f != nil {
		defer f.Close()
		idle := time.NewTimer(s.cfg.Heartbeat)
		defer idle.Stop()
		for {
			var size int64
			done := true
			var changed <-chan struct{}
			if live != nil {
				size, done, changed = live.state()
			}
			if done {
				fi, err := f.Stat()
				if err != nil {
					emit(apiv1.BuildLogEvent{Type: apiv1.BuildLogError, Code: "internal", Message: "the build log could not be read"})
					return nil
				}
				size = fi.Size()
			}
			if err := lr.read(size, done, emit); err != nil {
				return nil
			}
			if done {
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
			case <-idle.C:
				if ew.heartbeat() != nil {
					return nil
				}
			}
			idle.Reset(s.cfg.Heartbeat)
		}
	}
	// The log is complete; the operation records its end a moment later.
	end, err := s.waitOperationEnd(ctx, op)
	if err != nil {
		emit(apiv1.BuildLogEvent{Type: apiv1.BuildLogError, Code: "unavailable",
			Message: "the build has not ended yet; reattach with after= the last seq"})
		return nil
	}
	ev := apiv1.BuildLogEvent{Seq: lr.seq + 1, Type: apiv1.BuildLogEnd, State: string(end.State)}
	if end.Error != nil {
		ev.Error = &apiv1.OpError{Code: end.Error.Code, Message: end.Error.Message}
	}
	if ev.Seq > after {
		emit(ev)
	}
	return nil
}

// waitOperationEnd waits (bounded) for an operation to be terminal.
func (s *Server) waitOperationEnd(ctx context.Context, op *store.Operation) (*store.Operation, error) {
	for i := 0; i < 4 && !op.State.Terminal(); i++ {
		var err error
		op, err = s.ops.Wait(ctx, op.TenantID, op.ID, s.cfg.MaxWait)
		if err != nil {
			return nil, err
		}
	}
	if !op.State.Terminal() {
		return nil, fmt.Errorf("operation %s is still %s", op.ID, op.State)
	}
	return op, nil
}

// json writes one event value as NDJSON or SSE (id: seq when not 0).
func (ew *eventWriter) json(v any, seq uint64) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var buf []byte
	if ew.sse {
		if seq > 0 {
			buf = append(buf, "id: "+strconv.FormatUint(seq, 10)+"\n"...)
		}
		buf = append(buf, "data: "...)
		buf = append(buf, b...)
		buf = append(buf, "\n\n"...)
	} else {
		buf = append(b, '\n')
	}
	if _, err := ew.w.Write(buf); err != nil {
		return err
	}
	return ew.flush()
}
