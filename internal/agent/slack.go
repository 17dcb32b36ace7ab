package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Under TCG every guest syscall is slow enough for the Go runtime's sysmon
// thread to retake the P it holds, and each time sysmon does, it goes back
// to waking every 20 µs: during a command or a stream it was a quarter of
// the agent's CPU (its thread's time in the guest's /proc, 32 MiB of
// output), each wake-up a timer interrupt and two context switches, all
// emulated. A timer slack of agentTimerSlack on the agent's threads lets
// the guest kernel fold those sleeps into the next timer interrupt it has
// anyway (the tick, 4 ms at HZ=250): sysmon then acts at most every few
// milliseconds, which on one or two vCPUs loses nothing.
//
// A thread's slack is inherited by the threads and processes it creates,
// and a tenant's processes must keep the kernel's default (their own
// timers as precise as on any machine), so commands are started from one
// thread that keeps the slack the agent started with: spawner.

// agentTimerSlack is the timer slack of the agent's threads.
const agentTimerSlack = 4_000_000 // ns

// raiseTimerSlack sets agentTimerSlack on every thread of this process and
// returns the slack they had (the kernel's default for PID 1), for the
// spawner's thread. Threads made later inherit it from the thread that
// makes them.
// It acts once per process: later calls return what the first found.
func raiseTimerSlack(log *slog.Logger) (int, error) {
	slackOnce.Do(func() { slackBase, slackErr = raiseAllSlack(log) })
	return slackBase, slackErr
}

var (
	slackOnce sync.Once
	slackBase int
	slackErr  error
)

func raiseAllSlack(log *slog.Logger) (int, error) {
	base, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return 0, err
	}
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, err
	}
	val := []byte(strconv.Itoa(agentTimerSlack))
	for _, tid := range tids {
		// /proc/<tid>/timerslack_ns is that thread's (it is not listed
		// under /proc/self/task/<tid>).
		if err := os.WriteFile(filepath.Join("/proc", tid.Name(), "timerslack_ns"), val, 0); err != nil && !os.IsNotExist(err) {
			return base, err
		}
	}
	log.Debug("timer slack raised", "threads", len(tids), "slack_ns", agentTimerSlack, "default_ns", base)
	return base, nil
}

// spawner runs functions on one OS thread whose timer slack is the
// kernel's default, so the processes they start inherit that default.
type spawner struct{ jobs chan func() }

// newSpawner starts the spawner's thread with timer slack slackNS.
func newSpawner(slackNS int) (*spawner, error) {
	s := &spawner{jobs: make(chan func())}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is the spawner's
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slackNS), 0, 0, 0); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for job := range s.jobs {
			job()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return s, nil
}

// run calls fn on the spawner's thread and returns when it did. A nil
// spawner (no slack raised: tests, the agent outside a guest) calls fn
// where it is.
func (s *spawner) run(fn func()) {
	if s == nil {
		fn()
		return
	}
	done := make(chan struct{})
	s.jobs <- func() { fn(); close(done) }
	<-done
}
