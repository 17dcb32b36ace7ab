package qemu

import (
	"os"
	"path/filepath"
	"sync"
	"time"
)

// consoleKeep is how much console output is kept. QEMU appends the guest's
// serial output to console.log itself (so output is kept while no worker
// runs); the worker rotates it to console.old.log when it grows past
// consoleKeep, keeping at most about twice that on disk.
const consoleKeep = 256 << 10

type console struct {
	dir string

	mu     sync.Mutex
	frozen []byte // the tail kept in memory once the files are removed
	gone   bool
}

func newConsole(dir string) *console { return &console{dir: dir} }

// run rotates the log until done closes.
func (c *console) run(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			c.rotate()
		}
	}
}

func (c *console) rotate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return
	}
	live := filepath.Join(c.dir, fileConsole)
	st, err := os.Stat(live)
	if err != nil || st.Size() <= consoleKeep {
		return
	}
	// QEMU opened the file with O_APPEND, so after the truncate its next
	// write lands at the new end; a few bytes written in between are lost.
	tail := tailFile(live, consoleKeep)
	if err := os.WriteFile(filepath.Join(c.dir, fileConsoleOld), tail, 0o600); err != nil {
		return
	}
	_ = os.Truncate(live, 0)
}

func (c *console) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return c.frozen
	}
	return c.readLocked()
}

func (c *console) readLocked() []byte {
	old := tailFile(filepath.Join(c.dir, fileConsoleOld), consoleKeep)
	live := tailFile(filepath.Join(c.dir, fileConsole), consoleKeep)
	b := append(old, live...)
	if len(b) > consoleKeep {
		b = b[len(b)-consoleKeep:]
	}
	return b
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
