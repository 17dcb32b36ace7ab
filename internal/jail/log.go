package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// What a VMM writes (the guest's serial console, the VMM's own messages,
// many of them a guest can trigger at will) must not grow a host file
// without bound, also while no worker runs. So a VMM never writes a log
// file: it writes into a pipe (its stdout, its stderr, an fd QEMU puts in
// an fdset) or a FIFO it opens by path (Firecracker's logger), and a
// small copier process reads them and keeps each log as two files of at
// most Keep bytes: the live one and, once that is full, the previous one
// (OldLogPath). At most 2×Keep bytes are ever on disk per log.
//
// The copier is this binary re-executed (like the jail init), started by
// Start before the VMM may run. It runs in a process group of its own (a
// signal to the worker's group misses it, and killing the VMM's group
// lets it save what the VMM wrote last), is no child the worker must stay
// alive for, and ends when every write end of its pipes is closed, that
// is when the VMM and everything it started are gone. It stays root, so
// a VMM taken over by its guest can neither signal nor trace it; it holds
// only fds (its pipes, its files: no directory, no path lookups), reads
// into one buffer per log and parses nothing.

const (
	logArg0      = "space-jail-log"
	envLogConfig = "SPACE_JAIL_LOG_CONFIG"
	logBuf       = 64 << 10
)

// A Log is one bounded log a jailed program writes. Make it with NewLog
// or NewFIFOLog, hand it to Spec.Logs, and Close it once Start returned.
type Log struct {
	in        *os.File // what the copier reads
	w         *os.File // the pipe's write end (nil for a FIFO)
	live, old *os.File
	keep      int64
	fifo      bool
}

// OldLogPath is where the log at path keeps its previous part:
// console.log's is console.old.log.
func OldLogPath(path string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + ".old" + ext
}

// NewLog makes the log at path (emptied, and its old part) for a program
// that writes into Writer, keeping at most keep bytes in each file.
func NewLog(path string, keep int64) (*Log, error) {
	l, err := newLog(path, keep)
	if err != nil {
		return nil, err
	}
	if l.in, l.w, err = os.Pipe(); err != nil {
		l.Close()
		return nil, fmt.Errorf("jail: log pipe: %w: %v", errdefs.ErrInternal, err)
	}
	return l, nil
}

// NewFIFOLog makes a FIFO named fifo in dir (nothing may be there yet)
// for a program that opens it by path and writes into it (Start gives it
// to the program's uid), copied into the log at path as NewLog's is. The
// copier holds the FIFO open for reading and writing, so it never sees an
// end on it: it copies it while the program's pipe logs are open, then
// what is left in it, so a Spec with a FIFO log needs a pipe log too.
func NewFIFOLog(dir *os.File, fifo, path string, keep int64) (*Log, error) {
	l, err := newLog(path, keep)
	if err != nil {
		return nil, err
	}
	l.fifo = true
	if err := unix.Mkfifoat(int(dir.Fd()), fifo, 0o600); err != nil {
		l.Close()
		if errors.Is(err, unix.EEXIST) {
			return nil, refuse(fifo, "something is already there")
		}
		return nil, fmt.Errorf("jail: make fifo %s: %w: %v", fifo, errdefs.ErrInternal, err)
	}
	// Opened for reading and writing, the open does not wait for a writer.
	fd, err := unix.Openat2(int(dir.Fd()), fifo, &unix.OpenHow{
		Flags: unix.O_RDWR | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: resolveBeneath,
	})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("jail: open fifo %s: %w: %v", fifo, errdefs.ErrInternal, err)
	}
	l.in = os.NewFile(uintptr(fd), fifo)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Uid != 0 {
		l.Close()
		return nil, refuse(fifo, "not the fifo the host made")
	}
	return l, nil
}

func newLog(path string, keep int64) (*Log, error) {
	if keep <= 0 {
		return nil, fmt.Errorf("jail: log %s: keep %d: %w", filepath.Base(path), keep, errdefs.ErrInvalidArgument)
	}
	l := &Log{keep: keep}
	for _, f := range []struct {
		path string
		to   **os.File
	}{{path, &l.live}, {OldLogPath(path), &l.old}} {
		fh, err := os.OpenFile(f.path, os.O_CREATE|os.O_RDWR|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("jail: log %s: %w: %v", filepath.Base(f.path), errdefs.ErrInternal, err)
		}
		*f.to = fh
	}
	return l, nil
}

// Writer is the end the program writes: its stdout or stderr, or an extra
// fd. Nil for a FIFO log.
func (l *Log) Writer() *os.File { return l.w }

// Close closes what this process holds of the log; the copier keeps its
// own. Safe to call twice.
func (l *Log) Close() {
	for _, f := range []*os.File{l.in, l.w, l.live, l.old} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// logFDs is one log as the copier gets it: its fds and its bound.
type logFDs struct {
	In, Live, Old int
	Keep          int64
	FIFO          bool
}

// StartLogCopier starts the copier of logs for the program whose files are
// in dir (named in the copier's arguments, so that a leak check finds it
// by the directory). Start calls it; a caller that starts a program
// another way (a test's stand-in) calls it itself. The returned Copier's
// Done closes when the copier has exited.
func StartLogCopier(dir string, logs []*Log) (*Copier, error) {
	var files []*os.File
	var fds []logFDs
	pipes := 0
	for _, l := range logs {
		n := 3 + len(files)
		files = append(files, l.in, l.live, l.old)
		fds = append(fds, logFDs{In: n, Live: n + 1, Old: n + 2, Keep: l.keep, FIFO: l.fifo})
		if !l.fifo {
			pipes++
		}
	}
	if pipes == 0 {
		return nil, fmt.Errorf("jail: log copier without a pipe log would never end: %w", errdefs.ErrInvalidArgument)
	}
	cfg, err := json.Marshal(fds)
	if err != nil {
		return nil, fmt.Errorf("jail: %w: %v", errdefs.ErrInternal, err)
	}
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{logArg0, dir},
		Env:         []string{envLogConfig + "=" + string(cfg), "GOMAXPROCS=1"},
		Dir:         "/",
		ExtraFiles:  files,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("jail: start the log copier: %w: %v", errdefs.ErrInternal, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	c := &Copier{Done: done, Process: Process{PID: cmd.Process.Pid}}
	c.StartTime, _ = StartTime(c.PID)
	return c, nil
}

// Copier is a started log copier.
type Copier struct {
	Process
	// Done closes when the copier has exited.
	Done <-chan struct{}
}

// Process names a process so that a reused pid is not mistaken for it.
type Process struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// copierExitWait bounds how long Release waits for a jail's log copier to
// save what the VMM wrote last and exit once the VMM is gone; past it the
// copier is killed.
const copierExitWait = 5 * time.Second

// waitGone waits (bounded by within) for p to exit, then SIGKILLs it if it
// has not: its files (logs in the sandbox's directory) must not stay open
// once its jail is released, or the volume they are on cannot be unmounted.
func (p Process) waitGone(within time.Duration) {
	if p.PID <= 0 {
		return
	}
	deadline := time.Now().Add(within)
	for Alive(p.PID, p.StartTime) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ReadLog returns the last n bytes of the log at path: its old part,
// then its live one (a read that races a rotation may repeat or miss a
// little).
func ReadLog(path string, n int64) []byte {
	b := append(tailOf(OldLogPath(path), n), tailOf(path, n)...)
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return b
}

func tailOf(path string, n int64) []byte {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	k, _ := f.ReadAt(b, off)
	return b[:k]
}

func init() {
	if len(os.Args) < 1 || os.Args[0] != logArg0 || os.Getenv(envLogConfig) == "" {
		return
	}
	var logs []logFDs
	if err := json.Unmarshal([]byte(os.Getenv(envLogConfig)), &logs); err != nil {
		os.Exit(125)
	}
	copyLogs(logs)
	os.Exit(0)
}

// copyLogs is the copier: each log in its goroutine until the pipe logs
// end, then what is left in the FIFO logs.
func copyLogs(logs []logFDs) {
	var pipes, fifos sync.WaitGroup
	var ins []*os.File
	for _, l := range logs {
		if l.FIFO {
			// Non-blocking again (handing it over made it blocking), so
			// that a deadline can end its reads.
			_ = unix.SetNonblock(l.In, true)
		}
		in := os.NewFile(uintptr(l.In), "in")
		r := &rotator{live: os.NewFile(uintptr(l.Live), "live"), old: os.NewFile(uintptr(l.Old), "old"), keep: l.Keep}
		wg := &pipes
		if l.FIFO {
			wg = &fifos
			ins = append(ins, in)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.copyFrom(in)
		}()
	}
	pipes.Wait()
	for _, in := range ins {
		_ = in.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	}
	fifos.Wait()
}

// rotator keeps a log's two files: it writes the live one up to keep
// bytes, then copies it over the old one and starts it again.
type rotator struct {
	live, old *os.File
	keep, off int64
}

func (r *rotator) copyFrom(in *os.File) {
	buf := make([]byte, logBuf)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			r.write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// write never fails: a write error (a full disk) loses output, and the
// copier keeps reading, so the program never waits on a log.
func (r *rotator) write(p []byte) {
	for len(p) > 0 {
		if r.off >= r.keep {
			r.rotate()
		}
		n := min(int64(len(p)), r.keep-r.off)
		_, _ = r.live.WriteAt(p[:n], r.off)
		r.off += n
		p = p[n:]
	}
}

func (r *rotator) rotate() {
	_ = r.old.Truncate(0)
	buf := make([]byte, logBuf)
	for off := int64(0); off < r.off; {
		n, err := r.live.ReadAt(buf[:min(int64(len(buf)), r.off-off)], off)
		if n > 0 {
			_, _ = r.old.WriteAt(buf[:n], off)
			off += int64(n)
		}
		if err != nil || n == 0 {
			break
		}
	}
	_ = r.live.Truncate(0)
	r.off = 0
}
