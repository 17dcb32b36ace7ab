package qemu

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/jail"
)

// What the logs keep. QEMU writes the guest's serial console, and its own
// messages, into pipes that the jail's log copier reads (jail.Log): each
// log is a live file and an old one (console.old.log) of at most this
// each, whether or not a worker runs, however fast the guest writes.
const (
	consoleKeep = 256 << 10
	vmmLogKeep  = 64 << 10
)

// console reads the console log.
type console struct {
	mu     sync.Mutex
	dir    string
	frozen []byte // the tail kept in memory once the files are removed
	gone   bool
}

func newConsole(dir string) *console { return &console{dir: dir} }

func (c *console) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return c.frozen
	}
	return c.readLocked()
}

func (c *console) readLocked() []byte {
	return jail.ReadLog(filepath.Join(c.dir, fileConsole), consoleKeep)
}

// freeze keeps the tail in memory before the files are removed.
func (c *console) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.gone {
		c.frozen = c.readLocked()
		c.gone = true
	}
}

func (c *console) tail(n int) []string { return lastLines(c.bytes(), n) }

// rotateLegacy rotates, until done closes, the console file of a VMM that
// appends to it itself (started before the log copier): once a second,
// past consoleKeep, its tail goes to the old part and it is emptied.
func (c *console) rotateLegacy(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		c.mu.Lock()
		live := filepath.Join(c.dir, fileConsole)
		if st, err := os.Stat(live); !c.gone && err == nil && st.Size() > consoleKeep {
			// QEMU opened the file with O_APPEND: after the truncate its
			// next write lands at the new end.
			tail := jail.ReadLog(live, consoleKeep)
			if os.WriteFile(filepath.Join(c.dir, fileConsoleOld), tail[max(len(tail)-consoleKeep, 0):], 0o600) == nil {
				_ = os.Truncate(live, 0)
			}
		}
		c.mu.Unlock()
	}
}
