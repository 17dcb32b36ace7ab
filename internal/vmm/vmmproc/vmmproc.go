// Package vmmproc holds what every VMM driver does alike with the process it
// runs: the record it keeps in a VM's state dir so that a later worker
// process can find and adopt the VMM, waiting for a process that is not its
// child, killing the VMM's process group, and reading the tail of its logs.
// Drivers (vmm/qemu, vmm/firecracker) use it; it knows nothing of either.
package vmmproc

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
)

// WriteRecord writes v as JSON to dir/name atomically (a temp file renamed
// over it), so a reader sees the old record or the new one, never half.
func WriteRecord(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// ReadRecord reads the record WriteRecord wrote into v. A missing record,
// or one that does not decode or that valid refuses, wraps
// errdefs.ErrNotFound: there is no VMM to adopt.
func ReadRecord(dir, name string, v any, valid func() bool) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no vmm recorded in state dir: %w", errdefs.ErrNotFound)
		}
		return fmt.Errorf("read vmm record: %w: %v", errdefs.ErrInternal, err)
	}
	if err := json.Unmarshal(b, v); err != nil || !valid() {
		return fmt.Errorf("corrupt vmm record: %w", errdefs.ErrNotFound)
	}
	return nil
}

// RemoveRecord removes a record and a temp file a crash left beside it.
func RemoveRecord(dir, name string) {
	_ = os.Remove(filepath.Join(dir, name))
	_ = os.Remove(filepath.Join(dir, name+".tmp"))
}

// WaitPidfd returns when the (non-child) process behind pidfd exits, and
// closes pidfd.
func WaitPidfd(pidfd int) {
	defer unix.Close(pidfd)
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil || !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// KillGroup SIGKILLs the process group led by pid (a VMM starts with
// Setpgid, so its group id is its pid), then waits, at most 10 s or until
// ctx ends, for done.
func KillGroup(ctx context.Context, pid int, done <-chan struct{}) error {
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

// TailLines returns the last n lines within the last maxBytes of the log
// at path (a jail.Log: its old part, then its live one; nil when it cannot
// be read). For logs and internal error details only.
func TailLines(path string, maxBytes int64, n int) []string {
	b := jail.ReadLog(path, maxBytes)
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
