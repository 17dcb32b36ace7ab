package sim

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// defaultBufferBytes bounds a process's buffered output unless its spec
// says otherwise, as the agent's default does.
const defaultBufferBytes = 4 << 20

// proc is one simulated process: a built-in command (see run) and its
// bounded event log. Its mutex guards everything below it.
type proc struct {
	spec agentproto.ProcessSpec
	argv []string

	mu        sync.Mutex
	info      agentproto.ProcessInfo
	events    []agentproto.Event
	bufBytes  int
	evicted   uint64 // Seq of the newest event evicted from the log
	lostBytes int64
	changed   chan struct{} // closed and replaced when an event is added
	stdinOpen bool
	readsIn   bool          // cat with no file: stdin goes to stdout
	wakeAt    time.Time     // when a sleep ends (zero: not sleeping)
	remaining time.Duration // of a sleep, in a frozen copy (a checkpoint or a suspend)
	timers    []*time.Timer
}

// startProc starts spec as process pid and runs its command.
func startProc(spec agentproto.ProcessSpec, pid int, fs func() *memFS) (*proc, error) {
	argv := spec.Argv
	switch {
	case spec.ID == "":
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "process id is empty")
	case len(argv) > 0 && spec.Shell != "":
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "set one of argv and shell")
	case spec.Shell != "":
		argv = strings.Fields(spec.Shell)
	}
	if len(argv) == 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "no command to run")
	}
	p := &proc{spec: spec, argv: argv, changed: make(chan struct{}), stdinOpen: spec.Stdin,
		info: agentproto.ProcessInfo{ID: spec.ID, PID: pid, State: agentproto.StateRunning, StartedAt: time.Now()}}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.emit(agentproto.Event{Type: agentproto.EventStarted, PID: pid})
	if spec.TimeoutSeconds > 0 {
		p.after(time.Duration(spec.TimeoutSeconds)*time.Second, func() { p.kill("SIGKILL", agentproto.ReasonTimeout) })
	}
	p.run(fs)
	return p, nil
}

// run is the built-in command set: echo, true, false, sleep SECONDS,
// cat [FILE…] (stdin to stdout without files), pwd and exit CODE.
// Anything else prints "command not simulated" and exits 127.
func (p *proc) run(fs func() *memFS) {
	name, args := p.argv[0], p.argv[1:]
	switch name[strings.LastIndexByte(name, '/')+1:] {
	case "true":
		p.exit(0)
	case "false":
		p.exit(1)
	case "echo":
		nl := "\n"
		if len(args) > 0 && args[0] == "-n" {
			nl, args = "", args[1:]
		}
		p.output(agentproto.EventStdout, []byte(strings.Join(args, " ")+nl))
		p.exit(0)
	case "pwd":
		cwd := p.spec.Cwd
		if cwd == "" {
			cwd = "/root"
		}
		p.output(agentproto.EventStdout, []byte(cwd+"\n"))
		p.exit(0)
	case "exit":
		code := 0
		if len(args) > 0 {
			code, _ = strconv.Atoi(args[0])
		}
		p.exit(code & 0xff)
	case "sleep":
		secs := 0.0
		if len(args) > 0 {
			secs, _ = strconv.ParseFloat(args[0], 64)
		}
		p.sleep(time.Duration(secs * float64(time.Second)))
	case "cat":
		if len(args) == 0 {
			p.readsIn = true
			if !p.stdinOpen {
				p.exit(0)
			}
			return
		}
		code := 0
		for _, a := range args {
			data, _, err := fs().read(a)
			if err != nil {
				p.output(agentproto.EventStderr, []byte("cat: "+a+": No such file or directory\n"))
				code = 1
				continue
			}
			p.output(agentproto.EventStdout, data)
		}
		p.exit(code)
	default:
		p.output(agentproto.EventStderr, []byte(name+": command not simulated\n"))
		p.exit(127)
	}
}

// sleep ends the process successfully after d.
func (p *proc) sleep(d time.Duration) {
	p.wakeAt = time.Now().Add(d)
	p.after(d, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.exit(0)
	})
}

func (p *proc) after(d time.Duration, f func()) {
	p.timers = append(p.timers, time.AfterFunc(d, f))
}

// emit appends ev with the next Seq and evicts the oldest events past
// the buffer bound (never the newest). p.mu is held.
func (p *proc) emit(ev agentproto.Event) {
	ev.Seq = p.info.LastSeq + 1
	ev.Time = time.Now()
	p.info.LastSeq = ev.Seq
	p.events = append(p.events, ev)
	p.bufBytes += len(ev.Data)
	limit := p.spec.BufferBytes
	if limit <= 0 {
		limit = defaultBufferBytes
	}
	for p.bufBytes > limit && len(p.events) > 1 {
		old := p.events[0]
		p.events = p.events[1:]
		p.bufBytes -= len(old.Data)
		p.lostBytes += int64(len(old.Data))
		p.evicted = old.Seq
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// output emits data in events of at most agentproto.MaxEventChunk.
func (p *proc) output(typ string, data []byte) {
	for len(data) > 0 {
		n := min(len(data), agentproto.MaxEventChunk)
		p.emit(agentproto.Event{Type: typ, Data: bytes.Clone(data[:n])})
		data = data[n:]
	}
}

func (p *proc) exit(code int) {
	p.end(&agentproto.ExitStatus{ExitCode: &code, Reason: agentproto.ReasonExited})
}

// kill ends a running process by signal sig for reason.
func (p *proc) kill(sig, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.end(&agentproto.ExitStatus{Signal: sig, Reason: reason})
}

// end records the exit once and stops the process's timers. p.mu is held.
func (p *proc) end(st *agentproto.ExitStatus) {
	if p.info.State != agentproto.StateRunning {
		return
	}
	for _, t := range p.timers {
		t.Stop()
	}
	p.timers, p.wakeAt, p.stdinOpen = nil, time.Time{}, false
	st.EndedAt = time.Now()
	p.info.State, p.info.Exit = agentproto.StateExited, st
	p.emit(agentproto.Event{Type: agentproto.EventExit, Exit: st})
}

func (p *proc) get() agentproto.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info
}

func (p *proc) stdin(data []byte, eof bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.info.State != agentproto.StateRunning {
		return errdefs.New(errdefs.ErrFailedPrecondition, "process %s has exited", p.spec.ID)
	}
	if !p.stdinOpen {
		return errdefs.New(errdefs.ErrFailedPrecondition, "process %s has no open stdin", p.spec.ID)
	}
	if p.readsIn {
		p.output(agentproto.EventStdout, data)
	}
	if eof {
		p.stdinOpen = false
		if p.readsIn {
			p.exit(0)
		}
	}
	return nil
}

func (p *proc) signal(s string) error {
	sig, err := agentproto.ParseSignal(s)
	if err != nil {
		return err
	}
	name := unix.SignalName(sig)
	switch sig {
	case unix.SIGCHLD, unix.SIGWINCH, unix.SIGURG, unix.SIGCONT, unix.SIGSTOP, unix.SIGTSTP:
		return nil // ignored or not simulated: the process runs on
	case unix.SIGKILL:
		p.kill(name, agentproto.ReasonKilled)
	default:
		p.kill(name, agentproto.ReasonSignaled)
	}
	return nil
}

// stop ends the process's timers for good (its sandbox is gone).
func (p *proc) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.timers {
		t.Stop()
	}
	p.timers = nil
}

// clone copies the process for a branch, a restore or a wake (frozen
// false: a running one goes on, a sleep for the time it had left), or
// into a checkpoint or a suspend (frozen: nothing runs in the copy). A
// timeout is not carried over.
func (p *proc) clone(frozen bool) *proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := &proc{spec: p.spec, argv: p.argv, info: p.info, events: append([]agentproto.Event(nil), p.events...),
		bufBytes: p.bufBytes, evicted: p.evicted, lostBytes: p.lostBytes, changed: make(chan struct{}),
		stdinOpen: p.stdinOpen, readsIn: p.readsIn}
	if c.info.State != agentproto.StateRunning {
		return c
	}
	left, sleeping := p.remaining, p.remaining > 0
	if !p.wakeAt.IsZero() {
		left, sleeping = max(time.Until(p.wakeAt), 0), true
	}
	switch {
	case !sleeping:
	case frozen:
		c.remaining = max(left, 1)
	default:
		c.sleep(left)
	}
	return c
}

// stream is an agentproto.EventStream over one process's log.
type stream struct {
	p      *proc
	after  uint64
	done   <-chan struct{} // the caller's context
	gone   <-chan struct{} // the sandbox was deleted
	closed chan struct{}
	once   sync.Once
	err    func() error
}

func (s *stream) Next() (agentproto.Event, error) {
	for {
		p := s.p
		p.mu.Lock()
		if s.after < p.evicted {
			ev := agentproto.Event{Seq: p.evicted, Type: agentproto.EventGap, Time: time.Now(), LostBytes: p.lostBytes}
			s.after = p.evicted
			p.mu.Unlock()
			return ev, nil
		}
		if n := len(p.events); n > 0 && s.after < p.events[n-1].Seq {
			ev := p.events[int(s.after+1-p.events[0].Seq)]
			s.after = ev.Seq
			p.mu.Unlock()
			return ev, nil
		}
		exited, changed := p.info.State == agentproto.StateExited, p.changed
		p.mu.Unlock()
		if exited {
			return agentproto.Event{}, io.EOF
		}
		select {
		case <-changed:
		case <-s.done:
			return agentproto.Event{}, s.err()
		case <-s.gone:
			return agentproto.Event{}, errdefs.New(errdefs.ErrNotFound, "the sandbox was deleted")
		case <-s.closed:
			return agentproto.Event{}, errdefs.New(errdefs.ErrCancelled, "event stream closed")
		}
	}
}

func (s *stream) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}
