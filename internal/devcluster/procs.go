package devcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// stopGrace is how long a spaced gets after SIGTERM before SIGKILL.
const stopGrace = 30 * time.Second

// process is one spaced (control or worker) the cluster runs.
type process struct {
	name, addr, dataDir, logPath string
	args                         []string
	baseArgs                     []string // the args it started with (RestartWorkerWith)
	env                          []string // added to spaced's environment (secrets: not in ps)
	cmd                          *exec.Cmd
	done                         chan struct{}
}

// start runs the process. Its death signal follows the thread that forked
// it, so that thread stays locked to a goroutine until the process ends:
// an unrelated goroutine that locks a thread and exits cannot take the
// process with it.
func (p *process) start(bin string) error {
	if err := os.MkdirAll(filepath.Dir(p.logPath), 0o700); err != nil {
		return err
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, p.args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.cmd, p.done = cmd, make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logFile.Close()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %w", p.name, err)
			close(p.done)
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(p.done)
	}()
	return <-started
}

func (p *process) pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits stopGrace, then SIGKILLs.
func (p *process) stop() {
	if p.cmd == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(stopGrace):
	}
	p.kill()
}

// kill SIGKILLs the process and waits for it.
func (p *process) kill() {
	if p.cmd == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// logTail is the last n bytes of the process's log.
func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	k, _ := f.ReadAt(b, off)
	return string(b[:k])
}

// freeAddr turns a "host:0" address into one with a free port (others are
// returned as they are).
func freeAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", addr, err)
	}
	if port != "0" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// flagLine is a flag line of a usage text, "  -name" as the flag package
// prints it or "  --name" as spaced does.
var flagLine = regexp.MustCompile(`^\s+--?([a-z][a-z0-9.-]*)`)

// flagsOf lists the flags `spaced <sub> -h` prints, or nil when spaced has
// no such subcommand (its usage is not "Usage of spaced <sub>").
func flagsOf(bin, sub string) map[string]bool {
	out, _ := exec.Command(bin, sub, "-h").CombinedOutput()
	if !bytes.Contains(out, []byte("spaced "+sub)) {
		return nil
	}
	flags := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := flagLine.FindStringSubmatch(sc.Text()); m != nil {
			flags[m[1]] = true
		}
	}
	return flags
}

// withFlags appends "--name value" for each pair whose flag the binary
// has, and returns the names it left out.
func withFlags(args []string, has map[string]bool, pairs ...string) ([]string, []string) {
	var missing []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if has[pairs[i]] {
			args = append(args, "--"+pairs[i], pairs[i+1])
		} else {
			missing = append(missing, "--"+pairs[i])
		}
	}
	return args, missing
}

// waitHTTP polls url until it answers 200, the process exits or ctx ends.
func waitHTTP(ctx context.Context, p *process, url string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start-up; log %s:\n%s", p.name, p.logPath, logTail(p.logPath, 3000))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v; log %s:\n%s", p.name, err, p.logPath, logTail(p.logPath, 3000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pidAlive reports whether pid runs (zombies count as gone).
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// waitGone waits up to d for pid to be gone.
func waitGone(pid int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for pidAlive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still runs after %v", pid, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

var errNoControl = errors.New("this spaced has no `spaced control`")
