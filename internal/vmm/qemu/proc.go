package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
)

// Files the driver owns in a VM's StateDir. Stop and Recover-on-dead remove
// exactly these.
const (
	fileState      = "qemu-state.json"
	fileQMP        = "qmp.sock"
	fileAgent      = "agent.sock"
	fileConsole    = "console.log"
	fileConsoleOld = "console.old.log"
	fileVMMLog     = "qemu.log"
)

var ownedFiles = []string{fileState, fileQMP, fileAgent, fileConsole, fileConsoleOld, fileVMMLog}

// record is what Start writes to StateDir so a later worker process can find
// and adopt the VMM.
type record struct {
	Spec      vmm.BootSpec `json:"spec"`
	PID       int          `json:"pid"`
	StartTime uint64       `json:"start_time"` // /proc/<pid>/stat field 22, guards against PID reuse
	Accel     string       `json:"accel"`
	Binary    string       `json:"binary"`
	Incoming  bool         `json:"incoming,omitempty"`
	// Jail is the VMM's jail (uid, cgroups); nil in records written
	// before VMMs were jailed.
	Jail *jail.State `json:"jail,omitempty"`
}

func writeRecord(dir string, r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fileState+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, fileState))
}

func readRecord(dir string) (record, error) {
	var r record
	b, err := os.ReadFile(filepath.Join(dir, fileState))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return r, fmt.Errorf("no vmm recorded in state dir: %w", errdefs.ErrNotFound)
		}
		return r, fmt.Errorf("read vmm record: %w: %v", errdefs.ErrInternal, err)
	}
	if err := json.Unmarshal(b, &r); err != nil || r.PID <= 0 {
		return r, fmt.Errorf("corrupt vmm record: %w", errdefs.ErrNotFound)
	}
	return r, nil
}

func removeOwned(dir string) {
	for _, f := range ownedFiles {
		_ = os.Remove(filepath.Join(dir, f))
	}
	_ = os.Remove(filepath.Join(dir, fileState+".tmp"))
}

func procStartTime(pid int) (uint64, error) { return jail.StartTime(pid) }

// alive reports whether pid is still the process recorded with startTime.
func alive(pid int, startTime uint64) bool { return jail.Alive(pid, startTime) }

// waitPidfd returns when the (non-child) process behind pidfd exits.
func waitPidfd(pidfd int) {
	defer unix.Close(pidfd)
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil || !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// killGroup SIGKILLs the process group led by pid, then waits (bounded) for
// done. The group id equals pid because the VMM starts with Setpgid.
func killGroup(ctx context.Context, pid int, done <-chan struct{}) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill vmm group %d: %w: %v", pid, errdefs.ErrInternal, err)
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("vmm %d did not exit after SIGKILL: %w", pid, errdefs.ErrInternal)
	case <-ctx.Done():
		return fmt.Errorf("wait for vmm %d: %w", pid, errdefs.ErrDeadlineExceeded)
	}
}

// tailFile returns the last max bytes of path.
func tailFile(path string, max int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	b := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(b, off)
	return b[:n]
}

func lastLines(b []byte, n int) []string {
	s := strings.TrimRight(strings.ReplaceAll(string(b), "\r", ""), "\n")
	if s == "" || n <= 0 {
		return nil
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
