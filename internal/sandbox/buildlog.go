package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Build logs live in one file per build operation (<LogDir>/<op id>.log),
// so they can be read after the build and after a restart. While a build
// runs, readers follow the file and are woken by each write.

// maxBuildLog caps one build's log; the rest is dropped with a note.
const maxBuildLog = 32 << 20

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

// BuildLogMaxAge is how long a build's log is kept when its build is not
// deleted first (ReconcileTemplates prunes older ones at start).
const BuildLogMaxAge = 30 * 24 * time.Hour

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

// State returns how much of the file is written, whether the build is done
// and a channel closed at the next change.
func (l *buildLog) State() (int64, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size, l.done, l.changed
}

// BuildLog is the log file of a build operation, and its live log while
// this process writes it (nil otherwise: the file is complete).
func (s *Service) BuildLog(opID string) (live *buildLog, path string) {
	return s.buildLogs.get(opID), s.buildLogs.path(opID)
}
