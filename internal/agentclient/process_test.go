package agentclient_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

func TestArgvAndShell(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	r := run(t, ctx, e.c, agentproto.ProcessSpec{ID: "argv", Argv: []string{"echo", "hello", "world"}})
	if got := r.stdout.String(); got != "hello world\n" || exitCode(t, r) != 0 || r.exit.Reason != agentproto.ReasonExited {
		t.Fatalf("stdout %q exit %+v", got, r.exit)
	}
	if r.events[0].Type != agentproto.EventStarted || r.events[0].PID == 0 {
		t.Fatalf("first event %+v", r.events[0])
	}
	checkSeqs(t, r.events, 1)

	r = run(t, ctx, e.c, agentproto.ProcessSpec{ID: "sh", Shell: "echo out; echo err >&2; cd /tmp; pwd; exit 3", Cwd: "/"})
	if r.stdout.String() != "out\n/tmp\n" || r.stderr.String() != "err\n" || exitCode(t, r) != 3 {
		t.Fatalf("stdout %q stderr %q exit %+v", r.stdout.String(), r.stderr.String(), r.exit)
	}
	info, err := e.c.Get(ctx, "sh")
	if err != nil || info.State != agentproto.StateExited || info.LastSeq != r.events[len(r.events)-1].Seq {
		t.Fatalf("get: %+v %v", info, err)
	}
}

func TestStartErrors(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tests := []struct {
		name string
		spec agentproto.ProcessSpec
		want *errdefs.Class
	}{
		{"no id", agentproto.ProcessSpec{Argv: []string{"true"}}, errdefs.ErrInvalidArgument},
		{"both", agentproto.ProcessSpec{ID: "b", Argv: []string{"true"}, Shell: "true"}, errdefs.ErrInvalidArgument},
		{"missing binary", agentproto.ProcessSpec{ID: "m", Argv: []string{"no-such-binary-xyz"}}, errdefs.ErrNotFound},
		{"bad cwd", agentproto.ProcessSpec{ID: "c", Argv: []string{"true"}, Cwd: "/no/such/dir"}, errdefs.ErrInvalidArgument},
		{"bad user", agentproto.ProcessSpec{ID: "u", Argv: []string{"true"}, User: "no-such-user"}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		if _, err := e.c.Start(ctx, tt.spec); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	run(t, ctx, e.c, agentproto.ProcessSpec{ID: "dup", Argv: []string{"true"}})
	if _, err := e.c.Start(ctx, agentproto.ProcessSpec{ID: "dup", Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("duplicate id: %v", err)
	}
	if _, err := e.c.Get(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get unknown: %v", err)
	}
	if _, err := e.c.Events(ctx, "nope", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("events unknown: %v", err)
	}
}

func TestConfigureEnvAndUser(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	ctx := ctxT(t)
	info, err := e.c.WaitReady(ctx)
	if err != nil || info.Configured || info.Version != agentproto.Version {
		t.Fatalf("ready: %+v %v", info, err)
	}
	if err := e.c.Configure(ctx, agentproto.Configure{SandboxID: "sb_1", Hostname: "ignored-in-test-mode",
		Env: map[string]string{"FOO": "default", "BAR": "bar"}, Entropy: []byte("0123456789abcdef"), Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if info, _ := e.c.Ping(ctx); !info.Configured || info.SandboxID != "sb_1" {
		t.Fatalf("ping after configure: %+v", info)
	}
	r := run(t, ctx, e.c, agentproto.ProcessSpec{ID: "env", Shell: `echo "$FOO $BAR $HOME"; id -u; id -g`,
		Env: map[string]string{"FOO": "override"}, User: "1234:2345"})
	if got := r.stdout.String(); got != "override bar /\n1234\n2345\n" {
		t.Fatalf("stdout %q stderr %q", got, r.stderr.String())
	}
}

func TestStdinAndEOF(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if _, err := e.c.Start(ctx, agentproto.ProcessSpec{ID: "cat", Argv: []string{"cat"}, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", agentproto.MaxStdinChunk+100)
	if err := e.c.Stdin(ctx, "cat", []byte("hello\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Stdin(ctx, "cat", []byte(big), true); err != nil {
		t.Fatal(err)
	}
	r := collect(t, ctx, e.c, "cat", 0)
	if r.stdout.String() != "hello\n"+big || exitCode(t, r) != 0 {
		t.Fatalf("stdout %d bytes, exit %+v", r.stdout.Len(), r.exit)
	}
	if err := e.c.Stdin(ctx, "cat", []byte("late"), false); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("stdin after exit: %v", err)
	}
	// Without Stdin the process reads /dev/null.
	r = run(t, ctx, e.c, agentproto.ProcessSpec{ID: "null", Argv: []string{"cat"}})
	if r.stdout.Len() != 0 || exitCode(t, r) != 0 {
		t.Fatalf("cat of /dev/null: %q %+v", r.stdout.String(), r.exit)
	}
}

func TestPTYAndResize(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := e.c.Start(ctx, agentproto.ProcessSpec{ID: "tty", Shell: "stty size; test -t 0 && echo isatty; read x; stty size",
		PTY: &agentproto.PTY{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.c.Events(ctx, "tty", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &result{}
	for !strings.Contains(r.stdout.String(), "isatty") {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("before resize: %v (output %q)", err, r.stdout.String())
		}
		r.add(ev)
	}
	if !strings.Contains(r.stdout.String(), "24 80") {
		t.Fatalf("initial size: %q", r.stdout.String())
	}
	if err := e.c.Resize(ctx, "tty", 50, 132); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Stdin(ctx, "tty", []byte("go\n"), false); err != nil {
		t.Fatal(err)
	}
	rest := drain(t, s)
	if !strings.Contains(rest.stdout.String(), "50 132") || rest.stderr.Len() != 0 || exitCode(t, rest) != 0 {
		t.Fatalf("after resize: %q %+v", rest.stdout.String(), rest.exit)
	}
	if err := e.c.Resize(ctx, "tty", 1, 1); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("resize after exit: %v", err)
	}
}

func TestTimeoutKillsWholeGroup(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := e.c.Start(ctx, agentproto.ProcessSpec{ID: "slow", Shell: "sleep 1000 & echo $!; wait", TimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, ctx, e.c, "slow", 0)
	if r.exit.Reason != agentproto.ReasonTimeout || r.exit.Signal != "SIGKILL" || r.exit.ExitCode != nil {
		t.Fatalf("exit %+v", r.exit)
	}
	bg, err := strconv.Atoi(strings.TrimSpace(r.stdout.String()))
	if err != nil {
		t.Fatalf("background pid %q", r.stdout.String())
	}
	waitGone(t, bg)
}

// waitGone waits for a pid to disappear (killed and reaped by the agent's
// reaper, which adopts orphans as a subreaper).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still exists", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSignals(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tests := []struct{ sig, reason, name string }{
		{"SIGKILL", agentproto.ReasonKilled, "SIGKILL"},
		{"KILL", agentproto.ReasonKilled, "SIGKILL"},
		{"TERM", agentproto.ReasonSignaled, "SIGTERM"},
		{"2", agentproto.ReasonSignaled, "SIGINT"},
	}
	for i, tt := range tests {
		id := "sig" + strconv.Itoa(i)
		if _, err := e.c.Start(ctx, agentproto.ProcessSpec{ID: id, Argv: []string{"sleep", "1000"}}); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Signal(ctx, id, tt.sig); err != nil {
			t.Fatal(err)
		}
		r := collect(t, ctx, e.c, id, 0)
		if r.exit.Reason != tt.reason || r.exit.Signal != tt.name || r.exit.ExitCode != nil {
			t.Errorf("%s: exit %+v", tt.sig, r.exit)
		}
	}
	if err := e.c.Signal(ctx, "sig0", "BOGUS"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bogus signal: %v", err)
	}
}

func TestBufferOverflowGap(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const total = 200000
	_, err := e.c.Start(ctx, agentproto.ProcessSpec{ID: "flood", Shell: "head -c 200000 /dev/zero", BufferBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	waitExited(t, e, "flood")
	r := collect(t, ctx, e.c, "flood", 0)
	gap := r.events[0]
	if gap.Type != agentproto.EventGap || gap.LostBytes <= 0 {
		t.Fatalf("first event %+v", gap)
	}
	checkSeqs(t, r.events[1:], gap.Seq+1)
	if got := gap.LostBytes + int64(r.stdout.Len()); got != total || r.stdout.Len() > 4096 {
		t.Fatalf("lost %d + kept %d != %d", gap.LostBytes, r.stdout.Len(), total)
	}
	if exitCode(t, r) != 0 {
		t.Fatalf("exit %+v", r.exit)
	}
}

func waitExited(t *testing.T, e *testEnv, id string) {
	t.Helper()
	ctx := ctxT(t)
	for {
		info, err := e.c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State == agentproto.StateExited {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not exit", id)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestReplayAfter(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	all := run(t, ctx, e.c, agentproto.ProcessSpec{ID: "seq", Shell: "for i in 1 2 3 4 5; do echo $i; done"})
	for after := uint64(0); after <= uint64(len(all.events)); after++ {
		r := collect(t, ctx, e.c, "seq", after)
		if len(r.events) != len(all.events)-int(after) {
			t.Fatalf("after %d: %d events, want %d", after, len(r.events), len(all.events)-int(after))
		}
		checkSeqs(t, r.events, after+1)
	}
}

func TestConcurrentReaders(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if _, err := e.c.Start(ctx, agentproto.ProcessSpec{ID: "c", Argv: []string{"cat"}, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	const readers = 4
	results := make([]*result, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = collect(t, ctx, e.c, "c", 0)
		}()
	}
	for i := range 50 {
		if err := e.c.Stdin(ctx, "c", []byte("line "+strconv.Itoa(i)+"\n"), i == 49); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i, r := range results {
		if r.stdout.String() != results[0].stdout.String() || len(r.events) != len(results[0].events) || r.exit == nil {
			t.Fatalf("reader %d differs", i)
		}
		checkSeqs(t, r.events, 1)
	}
	if !strings.HasSuffix(results[0].stdout.String(), "line 49\n") {
		t.Fatalf("output %q", results[0].stdout.String())
	}
}
