package vmmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/vmm"
)

// AgentHarness adapts a driver to the agent checks: the guest it boots runs
// the real space-agent as PID 1 with a root disk (internal/testenv builds
// one from the base template).
type AgentHarness struct {
	NewDriver func(t *testing.T) vmm.Driver
	Guest     func(t *testing.T) Guest
	Timeout   time.Duration
}

// RunAgent checks, through the driver's agent link and the real agent,
// everything a sandbox's commands rely on. One VM serves all checks but the
// last, which stops it and looks for leftovers.
func RunAgent(t *testing.T, h AgentHarness) {
	hh := Harness{NewDriver: h.NewDriver, Timeout: h.Timeout}
	d := h.NewDriver(t)
	g := h.Guest(t)
	spec := Spec(t, g)
	vm := Start(t, hh, d, spec)
	c := agentclient.New(vm.DialAgent, nil)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), hh.timeout())
	defer cancel()
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatalf("agent not ready: %v\nconsole:\n%s", err, strings.Join(vm.ConsoleTail(40), "\n"))
	}
	if err := c.Configure(ctx, agentproto.Configure{SandboxID: "sbx_test", Hostname: "sbx-test",
		Env: map[string]string{"SPACE_TEST": "1"}, Entropy: []byte("0123456789abcdef0123456789abcdef"), Now: time.Now()}); err != nil {
		t.Fatalf("configure: %v", err)
	}

	t.Run("StdoutStderrExit", func(t *testing.T) {
		out := run(t, c, agentproto.ProcessSpec{Shell: "echo out; echo err >&2; echo $SPACE_TEST; hostname; exit 3"})
		if got := out.stdout; got != "out\n1\nsbx-test\n" {
			t.Errorf("stdout = %q", got)
		}
		if out.stderr != "err\n" {
			t.Errorf("stderr = %q", out.stderr)
		}
		wantExit(t, out.exit, 3, agentproto.ReasonExited)
	})
	t.Run("Stdin", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		id := start(t, c, agentproto.ProcessSpec{Argv: []string{"cat"}, Stdin: true})
		if err := c.Stdin(ctx, id, []byte("hello "), false); err != nil {
			t.Fatal(err)
		}
		if err := c.Stdin(ctx, id, []byte("world"), true); err != nil {
			t.Fatal(err)
		}
		out := collect(t, c, id, 0)
		if out.stdout != "hello world" {
			t.Errorf("stdout = %q", out.stdout)
		}
		wantExit(t, out.exit, 0, agentproto.ReasonExited)
	})
	t.Run("PTY", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		id := start(t, c, agentproto.ProcessSpec{Argv: []string{"sh"}, Stdin: true, PTY: &agentproto.PTY{Rows: 24, Cols: 80}})
		if err := c.Stdin(ctx, id, []byte("stty size; tty\n"), false); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, c, id, "24 80")
		if err := c.Resize(ctx, id, 40, 100); err != nil {
			t.Fatal(err)
		}
		if err := c.Stdin(ctx, id, []byte("stty size; exit 7\n"), false); err != nil {
			t.Fatal(err)
		}
		out := collect(t, c, id, 0)
		for _, want := range []string{"24 80", "/dev/pts/", "40 100"} {
			if !strings.Contains(out.stdout, want) {
				t.Errorf("pty output %q lacks %q", out.stdout, want)
			}
		}
		wantExit(t, out.exit, 7, agentproto.ReasonExited)
	})
	t.Run("ReattachAfterLinkDrop", func(t *testing.T) {
		id := start(t, c, agentproto.ProcessSpec{Shell: "i=1; while [ $i -le 40 ]; do echo line$i; i=$((i+1)); sleep 0.02; done"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := c.Events(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		var last uint64
		for !strings.Contains(got.String(), "line5\n") {
			ev, err := s.Next()
			if err != nil {
				t.Fatalf("events before drop: %v", err)
			}
			got.Write(ev.Data)
			last = ev.Seq
		}
		c.Disconnect() // the link drops, as at every restore
		s.Close()
		out := collect(t, c, id, last)
		got.WriteString(out.stdout)
		var want strings.Builder
		for i := 1; i <= 40; i++ {
			fmt.Fprintf(&want, "line%d\n", i)
		}
		if got.String() != want.String() {
			t.Errorf("output across the drop:\n%q\nwant\n%q", got.String(), want.String())
		}
		wantExit(t, out.exit, 0, agentproto.ReasonExited)
	})
	t.Run("TimeoutKillsGroup", func(t *testing.T) {
		out := run(t, c, agentproto.ProcessSpec{Shell: "sleep 1000 & echo $!; wait", TimeoutSeconds: 2})
		if out.exit == nil || out.exit.Reason != agentproto.ReasonTimeout {
			t.Fatalf("exit = %+v, want reason timeout", out.exit)
		}
		child, err := strconv.Atoi(strings.TrimSpace(out.stdout))
		if err != nil {
			t.Fatalf("child pid %q: %v", out.stdout, err)
		}
		check := run(t, c, agentproto.ProcessSpec{Shell: fmt.Sprintf("kill -0 %d 2>/dev/null && echo alive || echo gone", child)})
		if strings.TrimSpace(check.stdout) != "gone" {
			t.Errorf("background child %d after timeout: %s", child, check.stdout)
		}
	})
	t.Run("OOM", func(t *testing.T) {
		// dd's buffer is larger than the guest's memory. With overcommit on,
		// malloc succeeds and filling the buffer makes the kernel's OOM killer
		// end dd; the agent tells that apart from a plain SIGKILL.
		defer run(t, c, agentproto.ProcessSpec{Shell: "echo 0 > /proc/sys/vm/overcommit_memory"})
		out := run(t, c, agentproto.ProcessSpec{Shell: "echo 1 > /proc/sys/vm/overcommit_memory; exec dd if=/dev/zero of=/dev/null bs=1024M count=1"})
		if out.exit == nil || out.exit.Reason != agentproto.ReasonOOM || out.exit.Signal != "SIGKILL" {
			t.Errorf("exit = %+v (stderr %q), want reason oom by SIGKILL", out.exit, out.stderr)
		}
		if alive := run(t, c, agentproto.ProcessSpec{Argv: []string{"true"}}); alive.exit == nil || alive.exit.Reason != agentproto.ReasonExited {
			t.Errorf("agent after an OOM kill: %+v", alive.exit)
		}
	})
	t.Run("Files", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		payload := bytes.Repeat([]byte("space"), 50000)
		if _, err := c.WriteFile(ctx, "/root/dir/f.bin", 0o600, int64(len(payload)), bytes.NewReader(payload)); err != nil {
			t.Fatal(err)
		}
		r, fi, err := c.ReadFile(ctx, "/root/dir/f.bin")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(b, payload) || fi.Mode&0o777 != 0o600 {
			t.Errorf("read back %d bytes (err %v), mode %o", len(b), err, fi.Mode)
		}
		out := run(t, c, agentproto.ProcessSpec{Argv: []string{"wc", "-c", "/root/dir/f.bin"}})
		if !strings.HasPrefix(strings.TrimSpace(out.stdout), "250000") {
			t.Errorf("wc in guest: %q", out.stdout)
		}
	})
	t.Run("RelinkAfterPausedDrop", func(t *testing.T) {
		// As when the worker dies while a sandbox is paused and its
		// successor resumes it: the link drops while the VM is paused,
		// and the first call after the resume dials anew. Its handshake
		// must come up: under QEMU, about one such resume in ten left
		// the new connection carrying nothing from the guest back.
		p, ok := vm.(vmm.Pauser)
		if !ok {
			t.Skip("driver cannot pause")
		}
		for i := 0; i < 30; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if _, err := c.Ping(ctx); err != nil {
				cancel()
				t.Fatalf("round %d: ping before pause: %v", i, err)
			}
			if err := p.Pause(ctx); err != nil {
				cancel()
				t.Fatal(err)
			}
			c.Disconnect()
			if err := p.Resume(ctx); err != nil {
				cancel()
				t.Fatal(err)
			}
			if _, err := c.Ping(ctx); err != nil {
				t.Errorf("round %d: first ping after resume: %v\nconsole:\n%s", i, err, strings.Join(vm.ConsoleTail(20), "\n"))
			}
			cancel()
		}
	})
	t.Run("StopLeavesNothing", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pid := vm.PID()
		if err := vm.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		AssertGone(t, pid)
		if _, err := c.Ping(ctx); err == nil {
			t.Error("agent still answers after Stop")
		}
	})
}

type output struct {
	stdout, stderr string
	exit           *agentproto.ExitStatus
}

func start(t *testing.T, c *agentclient.Client, spec agentproto.ProcessSpec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if spec.ID == "" {
		spec.ID = fmt.Sprintf("cmd_%d", time.Now().UnixNano())
	}
	if _, err := c.Start(ctx, spec); err != nil {
		t.Fatalf("start %v: %v", spec, err)
	}
	return spec.ID
}

func run(t *testing.T, c *agentclient.Client, spec agentproto.ProcessSpec) output {
	t.Helper()
	return collect(t, c, start(t, c, spec), 0)
}

// collect reads a process's events after seq until its exit event.
func collect(t *testing.T, c *agentclient.Client, id string, after uint64) output {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := c.Events(ctx, id, after)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	defer s.Close()
	var out output
	var stdout, stderr strings.Builder
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("events of %s: %v", id, err)
		}
		switch ev.Type {
		case agentproto.EventStdout:
			stdout.Write(ev.Data)
		case agentproto.EventStderr:
			stderr.Write(ev.Data)
		case agentproto.EventGap:
			t.Errorf("unexpected gap of %d bytes", ev.LostBytes)
		case agentproto.EventExit:
			out.exit = ev.Exit
		}
		if ev.Type == agentproto.EventExit {
			break
		}
	}
	out.stdout, out.stderr = stdout.String(), stderr.String()
	if out.exit == nil {
		t.Fatalf("event stream of %s ended without an exit event", id)
	}
	return out
}

// waitOutput reads a process's output from the start until it contains want.
func waitOutput(t *testing.T, c *agentclient.Client, id, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("waiting for %q in %q: %v", want, got.String(), err)
		}
		got.Write(ev.Data)
	}
}

func wantExit(t *testing.T, ex *agentproto.ExitStatus, code int, reason string) {
	t.Helper()
	if ex == nil || ex.ExitCode == nil || *ex.ExitCode != code || ex.Reason != reason {
		t.Errorf("exit = %+v, want code %d reason %s", ex, code, reason)
	}
}
