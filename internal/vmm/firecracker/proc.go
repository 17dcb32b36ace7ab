package firecracker

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
// exactly these (and the run dir with everything in it).
const (
	fileState   = "firecracker-state.json"
	fileConsole = "console.log"
	fileVMMLog  = "firecracker.stderr.log"
	dirRun      = "run"

	// In the run dir.
	fileAPI       = "api.sock"
	fileVsock     = "v.sock"
	fileFCLog     = "firecracker.log"
	fileLoadState = "vmstate"
	fileNewMemory = "memory.new"
	fileNewState  = "vmstate.new"
)

var ownedFiles = []string{fileState, fileConsole, fileVMMLog}

// record is what Start writes to StateDir so a later worker process can find
// and adopt the VMM.
type record struct {
	Spec      vmm.BootSpec `json:"spec"`
	PID       int          `json:"pid"`
	StartTime uint64       `json:"start_time"` // /proc/<pid>/stat field 22, guards against PID reuse
	Binary    string       `json:"binary"`
	// Tap is the host device name of the NIC ("" without one).
	Tap string `json:"tap,omitempty"`
	// Incoming: started empty, to load a snapshot (StartIncoming).
	Incoming bool        `json:"incoming,omitempty"`
	Jail     *jail.State `json:"jail,omitempty"`
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
	_ = os.RemoveAll(filepath.Join(dir, dirRun))
}

// makeRunDir makes the run dir the jailed VMM writes in. Its uid is drawn
// only as the jail starts, after the VMM must already be able to bind its
// API socket here, so the dir starts writable by anyone (sticky: no one
// removes another's files) and is handed to the VMM's uid once it runs.
// Only root and this one jail can reach it: the state dir is root's.
func makeRunDir(stateDir string) error {
	d := filepath.Join(stateDir, dirRun)
	_ = os.RemoveAll(d)
	if err := os.Mkdir(d, 0o700); err != nil {
		return err
	}
	return os.Chmod(d, os.ModeSticky|0o733)
}

// giveRunDir hands the run dir (and a file the host put in it) to the
// VMM's uid once it is known.
func giveRunDir(stateDir string, uid int, files ...string) error {
	d := filepath.Join(stateDir, dirRun)
	for _, f := range files {
		p := filepath.Join(d, f)
		if err := os.Chown(p, uid, uid); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o600); err != nil {
			return err
		}
	}
	if err := os.Chown(d, uid, uid); err != nil {
		return err
	}
	return os.Chmod(d, 0o700)
}

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
// done. The group id equals pid because the jail starts it with Setpgid.
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

// tailLines returns the last n lines of the last max bytes of path.
func tailLines(path string, max int64, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max64(st.Size()-max, 0)
	b := make([]byte, st.Size()-off)
	k, _ := f.ReadAt(b, off)
	s := strings.TrimRight(strings.ReplaceAll(string(b[:k]), "\r", ""), "\n")
	if s == "" || n <= 0 {
		return nil
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// moveFile renames src to dst, copying when they are on different
// filesystems.
func moveFile(src, dst string) error {
	err := os.Rename(src, dst)
	if err == nil || !errors.Is(err, syscall.EXDEV) {
		return err
	}
	if err := copyFile(src, dst, 0o600); err != nil {
		return err
	}
	return os.Remove(src)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := out.ReadFrom(in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
