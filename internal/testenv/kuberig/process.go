package kuberig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a component gets to exit after SIGTERM before it is
// killed.
const stopGrace = 10 * time.Second

// process is one running component: its command, where its output goes and
// a channel closed when it has exited.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	log     *os.File
	done    chan struct{}
	err     error // set before done closes
}

// startProcess runs bin with args, its stdout and stderr appended to
// dir/<name>.log. The child gets SIGKILL if the process that started it dies
// first, so a test binary killed by its timeout leaves no control plane
// behind.
func startProcess(dir, name, bin string, args []string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, log: logFile, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// pid is the component's process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to stopGrace, then SIGKILL. Safe to call twice.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(stopGrace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// failure describes a component that exited early, with the tail of its log.
func (p *process) failure() error {
	return fmt.Errorf("%s exited (%v); last log lines:\n%s", p.name, p.err, tail(p.logPath, 20))
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitHealthy polls url over mutual TLS until it answers 200, the process
// exits, or ctx ends.
func waitHealthy(ctx context.Context, p *process, url string, ca []byte, client *keyPair) error {
	hc, err := probeClient(ca, client)
	if err != nil {
		return fmt.Errorf("%s probe: %w", p.name, err)
	}
	defer hc.CloseIdleConnections()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		last := probe(ctx, hc, url)
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.failure()
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy at %s (%v): %w; last log lines:\n%s",
				p.name, url, last, ctx.Err(), tail(p.logPath, 20))
		case <-tick.C:
		}
	}
}

// probeClient is an HTTPS client that trusts ca only and presents client
// (when not nil).
func probeClient(ca []byte, client *keyPair) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("no CA certificate")
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if client != nil {
		cert, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}

// probe GETs url once: nil when it answers 200.
func probe(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. Another process may take one before the component binds it; the
// component then fails to start with a clear bind error.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// errStopped is returned by calls on a cluster that has been stopped.
var errStopped = errors.New("kuberig: cluster stopped")
