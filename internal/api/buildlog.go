package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
	"unicode/utf8"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/store"
)

// A build's log is one file (internal/sandbox keeps and writes it); a
// reader follows it while the build runs, woken by each write.

// maxLogLine splits lines longer than this into several events.
const maxLogLine = 16 << 10

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
	live, path := s.svc.BuildLog(op.ID)
	f, err := os.Open(path)
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
				size, done, changed = live.State()
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
