package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// maxExited bounds how many finished processes (and their output) the agent
// keeps; the oldest are forgotten first.
const maxExited = 256

// outputGrace is how long the exit event waits for the output pipes to drain
// after the process itself ended; a background child that keeps them open
// past that loses the rest of its output.
const outputGrace = 500 * time.Millisecond

// processTable owns every process the agent started.
type processTable struct {
	log     *slog.Logger
	reaper  *reaper
	spawner *spawner // nil: start processes on any thread
	cgroups *cgroups
	etc     string
	env     func() map[string]string

	mu    sync.Mutex
	procs map[string]*process
	order []string // start order, for forgetting old exited processes
}

type process struct {
	id        string
	pid       int
	startedAt time.Time
	log       *eventLog
	cg        *cgroup
	osproc    *os.Process

	ioMu    sync.Mutex
	stdin   *os.File // pipe write end, or nil
	pty     *os.File // PTY master, or nil
	readers []*os.File

	mu         sync.Mutex
	exit       *agentproto.ExitStatus
	killReason string
	timer      *time.Timer
	outputs    sync.WaitGroup
}

func (t *processTable) get(id string) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.procs[id]
	if p == nil {
		return nil, errdefs.New(errdefs.ErrNotFound, "process %q not found", id)
	}
	return p, nil
}

func (t *processTable) list() []agentproto.ProcessInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]agentproto.ProcessInfo, 0, len(t.order))
	for _, id := range t.order {
		out = append(out, t.procs[id].info())
	}
	return out
}

func (p *process) info() agentproto.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := agentproto.ProcessInfo{ID: p.id, PID: p.pid, State: agentproto.StateRunning, StartedAt: p.startedAt, LastSeq: p.log.lastSeq()}
	if p.exit != nil {
		pi.State = agentproto.StateExited
		e := *p.exit
		pi.Exit = &e
	}
	return pi
}

// start validates spec and starts the process.
func (t *processTable) start(spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error) {
	if spec.ID == "" {
		return agentproto.ProcessInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "process id is required")
	}
	if (len(spec.Argv) == 0) == (spec.Shell == "") {
		return agentproto.ProcessInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "exactly one of argv and shell must be set")
	}
	if spec.TimeoutSeconds < 0 || spec.BufferBytes < 0 {
		return agentproto.ProcessInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "timeout and buffer size must not be negative")
	}
	argv := spec.Argv
	if spec.Shell != "" {
		argv = []string{"/bin/sh", "-c", spec.Shell}
	}
	u, err := lookupUser(t.etc, spec.User)
	if err != nil {
		return agentproto.ProcessInfo{}, err
	}
	env := buildEnv(&spec, t.env(), u)
	cwd := spec.Cwd
	if cwd == "" {
		cwd = "/"
		if fi, err := os.Stat(u.home); err == nil && fi.IsDir() {
			cwd = u.home
		}
	} else if cwd[0] != '/' {
		return agentproto.ProcessInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "cwd must be absolute")
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return agentproto.ProcessInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "working directory %q does not exist", cwd)
	}
	path, err := lookPath(argv[0], cwd, env)
	if err != nil {
		return agentproto.ProcessInfo{}, err
	}

	t.mu.Lock()
	if _, dup := t.procs[spec.ID]; dup {
		t.mu.Unlock()
		return agentproto.ProcessInfo{}, errdefs.New(errdefs.ErrConflict, "process %q already exists", spec.ID)
	}
	p := &process{id: spec.ID, log: newEventLog(spec.BufferBytes)}
	t.procs[spec.ID] = p // reserve the id
	t.order = append(t.order, spec.ID)
	t.mu.Unlock()

	if err := t.launch(p, &spec, path, argv, env, cwd, u); err != nil {
		t.forget(spec.ID)
		return agentproto.ProcessInfo{}, err
	}
	t.gc()
	return p.info(), nil
}

func (t *processTable) launch(p *process, spec *agentproto.ProcessSpec, path string, argv, env []string, cwd string, u *userInfo) error {
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: cwd, SysProcAttr: &syscall.SysProcAttr{}}
	if u.uid != 0 || u.gid != 0 || len(u.groups) > 1 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}
	}
	var childEnds []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				_ = f.Close()
			}
		}
	}
	if spec.PTY != nil {
		master, tty, err := pty.Open()
		if err != nil {
			return errdefs.New(errdefs.ErrInternal, "cannot allocate a pty").WithCause(err)
		}
		_ = pty.Setsize(master, &pty.Winsize{Rows: nonZero(spec.PTY.Rows, 24), Cols: nonZero(spec.PTY.Cols, 80)})
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
		p.pty = master
		p.readers = []*os.File{master}
		childEnds = []*os.File{tty}
	} else {
		cmd.SysProcAttr.Setpgid = true
		or, ow, err := os.Pipe()
		if err != nil {
			return errdefs.New(errdefs.ErrInternal, "cannot create pipes").WithCause(err)
		}
		er, ew, err := os.Pipe()
		if err != nil {
			closeAll([]*os.File{or, ow})
			return errdefs.New(errdefs.ErrInternal, "cannot create pipes").WithCause(err)
		}
		growPipe(or)
		growPipe(er)
		cmd.Stdout, cmd.Stderr = ow, ew
		p.readers = []*os.File{or, er}
		childEnds = []*os.File{ow, ew}
		if spec.Stdin {
			ir, iw, err := os.Pipe()
			if err != nil {
				closeAll([]*os.File{or, ow, er, ew})
				return errdefs.New(errdefs.ErrInternal, "cannot create pipes").WithCause(err)
			}
			cmd.Stdin = ir
			p.stdin = iw
			childEnds = append(childEnds, ir)
		}
	}
	cg, err := t.cgroups.create()
	if err != nil {
		t.log.Warn("process cgroup", "id", p.id, "err", err)
	}
	if cg != nil {
		p.cg = cg
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.fd
	}

	// Counted before the start: finish may wait for the pumps at once.
	p.outputs.Add(len(p.readers))
	pid, err := t.reaper.start(func() (int, error) {
		var err error
		t.spawner.run(func() { err = cmd.Start() }) // the default timer slack: slack.go
		if err != nil {
			return 0, err
		}
		// Under p.mu: the process is already listed, and info (a list, the
		// gc of another start) reads these fields.
		p.mu.Lock()
		p.pid, p.osproc, p.startedAt = cmd.Process.Pid, cmd.Process, time.Now().UTC()
		p.mu.Unlock()
		p.log.append(agentproto.Event{Type: agentproto.EventStarted, PID: cmd.Process.Pid, Time: p.startedAt})
		return cmd.Process.Pid, nil
	}, func(ws unix.WaitStatus, _ *unix.Rusage) { go p.finish(t.log, ws) })
	closeAll(childEnds)
	if err != nil {
		p.outputs.Add(-len(p.readers))
		closeAll(p.readers)
		closeAll([]*os.File{p.stdin})
		cg.remove()
		return startError(argv[0], err)
	}
	// Per-command records are Debug: the log is the serial console, an
	// emulated UART costing ~4 ms of VMM CPU per line under TCG.
	t.log.Debug("process started", "id", p.id, "pid", pid)

	kinds := []string{agentproto.EventStdout, agentproto.EventStderr}
	for i, r := range p.readers {
		go p.pump(r, kinds[i])
	}
	if spec.TimeoutSeconds > 0 {
		p.mu.Lock()
		p.timer = time.AfterFunc(time.Duration(spec.TimeoutSeconds)*time.Second, func() { p.kill(agentproto.ReasonTimeout) })
		p.mu.Unlock()
	}
	return nil
}

// growPipe raises a pipe's capacity to outputPipeSize, best effort: the
// kernel may refuse (pipe-max-size, per-user pipe limits) and the default
// capacity is only slower.
// It goes through SyscallConn, not Fd, which would make the file blocking
// and so break the read deadlines finish relies on.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, outputPipeSize) })
	}
}

func startError(argv0 string, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errdefs.New(errdefs.ErrNotFound, "cannot start %q: not found", argv0).WithCause(err)
	case errors.Is(err, os.ErrPermission):
		return errdefs.New(errdefs.ErrPermissionDenied, "cannot start %q: permission denied", argv0).WithCause(err)
	}
	return errdefs.New(errdefs.ErrInternal, "cannot start %q", argv0).WithCause(err)
}

func nonZero(v, def uint16) uint16 {
	if v == 0 {
		return def
	}
	return v
}

// outputPipeSize is the capacity asked for each output pipe (the default
// is 64 KiB): a process writing in bulk then fills a pipe read of up to
// agentproto.MaxEventChunk, so the agent makes few large events instead of
// many small ones. Pipe pages are allocated as they fill, so an idle pipe
// costs nothing more.
const outputPipeSize = 1 << 20

// pump copies one output stream into the event log until EOF. Each read
// takes whatever the pipe holds, up to agentproto.MaxEventChunk, and becomes
// one event at once: bulk output coalesces into large events while a lone
// line is never held back.
func (p *process) pump(r *os.File, kind string) {
	defer p.outputs.Done()
	buf := make([]byte, agentproto.MaxEventChunk)
	for {
		n, err := r.Read(buf)
		switch {
		case n >= len(buf)/2:
			// Bulk output: the event keeps the read buffer itself (no copy;
			// at most half of its capacity unused) and the next read gets
			// a new one.
			p.log.append(agentproto.Event{Type: kind, Data: buf[:n:n]})
			buf = make([]byte, agentproto.MaxEventChunk)
		case n > 0:
			p.log.append(agentproto.Event{Type: kind, Data: append([]byte(nil), buf[:n]...)})
		}
		if err != nil {
			return // EOF, or EIO from a PTY master whose terminal closed
		}
	}
}

// finish runs once the reaper collected the process: it lets the output
// drain, records the exit status and appends the exit event.
func (p *process) finish(log *slog.Logger, ws unix.WaitStatus) {
	drained := make(chan struct{})
	go func() { p.outputs.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputGrace):
		// Something else in the group holds the output open: stop reading.
		p.ioMu.Lock()
		for _, r := range p.readers {
			_ = r.SetReadDeadline(time.Now())
		}
		p.ioMu.Unlock()
		<-drained
	}

	p.mu.Lock()
	// timeout_seconds bounds everything the command started: what it left
	// running in its cgroup (a fork bomb's survivors, a stray background
	// job) still dies when the timer fires.
	if p.timer != nil && !p.cg.populated() {
		p.timer.Stop()
	}
	st := &agentproto.ExitStatus{Reason: agentproto.ReasonExited, EndedAt: time.Now().UTC()}
	switch {
	case ws.Exited():
		code := ws.ExitStatus()
		st.ExitCode = &code
	case ws.Signaled():
		st.Signal = unix.SignalName(ws.Signal())
		st.Reason = agentproto.ReasonSignaled
		switch {
		case p.killReason != "":
			st.Reason = p.killReason
		case ws.Signal() == unix.SIGKILL && p.cg.oomKilled():
			st.Reason = agentproto.ReasonOOM
		}
	}
	p.exit = st
	p.mu.Unlock()

	p.ioMu.Lock()
	for _, f := range append(p.readers, p.stdin) {
		if f != nil {
			_ = f.Close()
		}
	}
	p.stdin, p.pty = nil, nil
	p.ioMu.Unlock()
	if p.osproc != nil {
		_ = p.osproc.Release() // drops the pidfd; the reaper already waited
	}
	p.cg.remove()
	p.log.append(agentproto.Event{Type: agentproto.EventExit, Exit: st})
	log.Debug("process exited", "id", p.id, "pid", p.pid, "reason", st.Reason)
}

// kill SIGKILLs everything the command started, recording why: the whole
// cgroup when there is one (nothing escapes it, not even a fork bomb that
// keeps making new sessions), and the process group as well, which is all
// there is without cgroups.
func (p *process) kill(reason string) {
	p.mu.Lock()
	exited := p.exit != nil
	if !exited && p.killReason == "" {
		p.killReason = reason
	}
	p.mu.Unlock()
	p.cg.kill()
	if exited {
		// Only what the command left behind: its group leader is gone and
		// the number may be another process's by now.
		go p.cg.removeWhenEmpty()
		return
	}
	_ = unix.Kill(-p.pid, unix.SIGKILL)
}

func (p *process) signal(sig unix.Signal) {
	if sig == unix.SIGKILL {
		p.kill(agentproto.ReasonKilled)
		return
	}
	_ = unix.Kill(-p.pid, sig)
}

func (p *process) writeStdin(ctx context.Context, data []byte, eof bool) error {
	p.ioMu.Lock()
	defer p.ioMu.Unlock()
	w := p.stdin
	if p.pty != nil {
		w = p.pty
	}
	if w == nil {
		if p.info().State == agentproto.StateExited {
			return errdefs.New(errdefs.ErrConflict, "process %q has exited", p.id)
		}
		return errdefs.New(errdefs.ErrFailedPrecondition, "stdin of process %q is not open", p.id)
	}
	stop := context.AfterFunc(ctx, func() { _ = w.SetWriteDeadline(time.Now()) })
	defer func() {
		if !stop() {
			_ = w.SetWriteDeadline(time.Time{})
		}
	}()
	if len(data) > 0 {
		if _, err := w.Write(data); err != nil {
			return errdefs.New(errdefs.ErrConflict, "stdin of process %q is closed", p.id).WithCause(err)
		}
	}
	if eof {
		if p.pty != nil {
			_, _ = p.pty.Write([]byte{4}) // ^D: EOF for a terminal in canonical mode
		} else {
			_ = p.stdin.Close()
			p.stdin = nil
		}
	}
	return nil
}

func (p *process) resize(rows, cols uint16) error {
	p.ioMu.Lock()
	defer p.ioMu.Unlock()
	if p.pty == nil {
		return errdefs.New(errdefs.ErrFailedPrecondition, "process %q has no pty", p.id)
	}
	if err := pty.Setsize(p.pty, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		return errdefs.New(errdefs.ErrInternal, "resize failed").WithCause(err)
	}
	return nil
}

func (t *processTable) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.procs, id)
	for i, o := range t.order {
		if o == id {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
}

// gc forgets the oldest exited processes beyond maxExited.
func (t *processTable) gc() {
	t.mu.Lock()
	defer t.mu.Unlock()
	exited := 0
	for _, id := range t.order {
		if t.procs[id].info().State == agentproto.StateExited {
			exited++
		}
	}
	for i := 0; exited > maxExited && i < len(t.order); {
		id := t.order[i]
		if t.procs[id].info().State == agentproto.StateExited {
			delete(t.procs, id)
			t.order = append(t.order[:i], t.order[i+1:]...)
			exited--
			continue
		}
		i++
	}
}

// events streams the process's events after `after` to send until the exit
// event was sent or ctx is done.
func (p *process) events(ctx context.Context, after uint64, send func(agentproto.Event) error) error {
	for {
		evs, done, changed := p.log.since(after)
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return err
			}
			after = ev.Seq
		}
		if done {
			return nil // the exit event is in evs or was already behind after
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
