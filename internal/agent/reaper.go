package agent

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// reaper is the agent's one wait loop. Every child the agent starts is
// registered with it (under its lock, inside start, so an early exit cannot be
// missed); orphans re-parented to the agent are reaped and dropped. Nothing
// else in the agent may wait for children, or the two would race.
//
// As PID 1 it waits for any child (wait4(-1)): everything in the guest is
// ours. Inside another process (tests, or an agent embedded on a host) it
// waits only in the process groups it made (each command leads its own
// group: wait4(-pgid)), so the host process's other children — an os/exec
// command such as mkfs.ext4 — keep their exit status for their own Wait.
type reaper struct {
	log     *slog.Logger
	pid1    bool
	mu      sync.Mutex
	waiters map[int]func(unix.WaitStatus, *unix.Rusage)
	groups  map[int]bool // process groups started here (not PID 1 only)
	sigchld chan os.Signal
}

// processReaper is the process-wide reaper: wait4(-1) collects every child
// of the process, so two reapers (two Agents in one test binary) would steal
// each other's exits. It is the one piece of global state, and runs for the
// life of the process.
var (
	reaperOnce    sync.Once
	processReaper *reaper
)

func sharedReaper(log *slog.Logger) *reaper {
	reaperOnce.Do(func() {
		processReaper = newReaper(log)
		go processReaper.run(context.Background())
	})
	return processReaper
}

func newReaper(log *slog.Logger) *reaper {
	// Orphans of our process groups come to us, not to the host's init, when
	// the agent is not PID 1 (tests); as PID 1 this is a no-op.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	r := &reaper{log: log, pid1: os.Getpid() == 1, waiters: map[int]func(unix.WaitStatus, *unix.Rusage){},
		groups: map[int]bool{}, sigchld: make(chan os.Signal, 1)}
	signal.Notify(r.sigchld, syscall.SIGCHLD)
	return r
}

// start runs fn (which must start exactly one child, as the leader of its
// own process group, and return its pid) with the registry locked, then
// registers done for that pid.
func (r *reaper) start(fn func() (int, error), done func(unix.WaitStatus, *unix.Rusage)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fn()
	if err != nil {
		return 0, err
	}
	r.waiters[pid] = done
	r.groups[pid] = true
	return pid, nil
}

// run reaps until ctx is done.
func (r *reaper) run(ctx context.Context) {
	defer signal.Stop(r.sigchld)
	for {
		r.reapAll()
		select {
		case <-ctx.Done():
			return
		case <-r.sigchld:
		}
	}
}

func (r *reaper) reapAll() {
	if r.pid1 {
		for r.reap(-1) {
		}
		return
	}
	r.mu.Lock()
	groups := make([]int, 0, len(r.groups))
	for g := range r.groups {
		groups = append(groups, g)
	}
	r.mu.Unlock()
	for _, g := range groups {
		for r.reap(-g) {
		}
	}
}

// reap collects one exited child matching wait4's pid argument (-1: any;
// -g: any in process group g) and says whether it found one. A group with
// no children left is forgotten.
func (r *reaper) reap(which int) bool {
	var ws unix.WaitStatus
	var ru unix.Rusage
	pid, err := unix.Wait4(which, &ws, unix.WNOHANG, &ru)
	if err == unix.EINTR {
		return true
	}
	if err == unix.ECHILD && which < -1 {
		r.mu.Lock()
		delete(r.groups, -which)
		r.mu.Unlock()
	}
	if err != nil || pid <= 0 {
		return false
	}
	r.mu.Lock()
	done := r.waiters[pid]
	delete(r.waiters, pid)
	r.mu.Unlock()
	if done != nil {
		done(ws, &ru)
	} else {
		r.log.Debug("reaped orphan", "pid", pid)
	}
	return true
}
