package agent

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
)

// TestTimerSlack: raiseTimerSlack sets agentTimerSlack on every thread; a
// process started from such a thread inherits it (the reason for the
// spawner), and one started through the spawner, or by the agent's
// process table, keeps the default.
func TestTimerSlack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: setting another thread's timer slack takes CAP_SYS_NICE")
	}
	base, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setAllSlack(t, base) })
	slackOnce = sync.Once{} // each run of the test raises anew (-count)
	log := slog.New(slog.DiscardHandler)
	got, err := raiseTimerSlack(log)
	if err != nil || got != base {
		t.Fatalf("raiseTimerSlack: %d, %v; want the default %d", got, err, base)
	}
	tids, _ := os.ReadDir("/proc/self/task")
	for _, tid := range tids {
		b, err := os.ReadFile(filepath.Join("/proc", tid.Name(), "timerslack_ns"))
		if v := strings.TrimSpace(string(b)); err == nil && v != strconv.Itoa(agentTimerSlack) {
			t.Errorf("thread %s: slack %s, want %d", tid.Name(), v, agentTimerSlack)
		}
	}

	childSlack := func(run func(func())) int {
		t.Helper()
		var out []byte
		var err error
		run(func() { out, err = exec.Command("cat", "/proc/self/timerslack_ns").Output() })
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	onRaisedThread := func(fn func()) {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			fn()
			close(done)
		}()
		<-done
	}
	if v := childSlack(onRaisedThread); v != agentTimerSlack {
		t.Errorf("a child of a raised thread has slack %d, want the inherited %d", v, agentTimerSlack)
	}
	s, err := newSpawner(base)
	if err != nil {
		t.Fatal(err)
	}
	if v := childSlack(s.run); v != base {
		t.Errorf("a child started by the spawner has slack %d, want the default %d", v, base)
	}

	a := New(Config{Logger: log, RaiseTimerSlack: true})
	if a.procs.spawner == nil {
		t.Fatal("RaiseTimerSlack gave no spawner")
	}
	if _, err := a.procs.start(agentproto.ProcessSpec{ID: "slack", Argv: []string{"cat", "/proc/self/timerslack_ns"}}); err != nil {
		t.Fatal(err)
	}
	p, _ := a.procs.get("slack")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []byte
	if err := p.events(ctx, 0, func(ev agentproto.Event) error {
		if ev.Type == agentproto.EventStdout {
			out = append(out, ev.Data...)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimSpace(string(out)); v != strconv.Itoa(base) {
		t.Errorf("a command the agent started has slack %q, want the default %d", v, base)
	}
}

func setAllSlack(t *testing.T, ns int) {
	tids, _ := os.ReadDir("/proc/self/task")
	for _, tid := range tids {
		p := filepath.Join("/proc", tid.Name(), "timerslack_ns")
		if err := os.WriteFile(p, []byte(strconv.Itoa(ns)), 0); err != nil && !os.IsNotExist(err) {
			t.Errorf("restore %s: %v", p, err)
		}
	}
}
