// Package pgtest gives tests a real, private PostgreSQL: Debian's server
// binaries (package postgresql), started once per test process in a
// temporary directory owned by the postgres system user (PostgreSQL refuses
// to run as root), listening only on a unix socket there, with password
// authentication and fsync off (a commit is written to the WAL before it is
// acknowledged, so a killed server loses nothing it confirmed; only a crash
// of the machine would). Each test gets a database of its own.
// A missing server fails the test with a message naming the package; it
// never skips (CI installs it with make setup).
//
// Use it from TestMain so the server stops when the tests end:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// It is for tests only; no production code imports it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinRoot is where Debian installs PostgreSQL's server binaries, one
// directory per major version.
const BinRoot = "/usr/lib/postgresql"

// startTimeout bounds initdb plus the server's start; stopTimeout its stop.
const (
	startTimeout = 2 * time.Minute
	stopTimeout  = 30 * time.Second
)

// Server is one running private PostgreSQL.
type Server struct {
	dir      string // data dir, socket dir and log, owned by the server's user
	password string // of the superuser "space"
	bin      string
	cred     *syscall.Credential
	stopOnce sync.Once
	stopErr  error

	mu      sync.Mutex // guards the current launch (Restart replaces it)
	cmd     *exec.Cmd
	exited  chan struct{}
	release chan struct{} // ends the goroutine whose thread started the server
}

var (
	mu      sync.Mutex
	shared  *Server
	started bool
	dbSeq   atomic.Int64
)

// Main runs the tests and then stops the server if one started.
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			if code == 0 {
				code = 1
			}
		}
		shared = nil
	}
	return code
}

// DSN returns the connection string of a fresh, empty database on the
// process's server (started on first use), dropped when t ends. The test
// fails when no server can start.
func DSN(t testing.TB) string {
	t.Helper()
	s := server(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return s.DSN(name)
}

// server returns the process's server, starting it on first use. A start
// that failed fails every later caller too, with the same message.
func server(t testing.TB) *Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !started {
		started = true
		s, err := Start()
		if err != nil {
			startErr = err
		} else {
			shared = s
		}
	}
	if shared == nil {
		t.Fatalf("pgtest: %v", startErr)
	}
	return shared
}

var startErr error

// DSN is the URL of database name on s, with its password.
func (s *Server) DSN(name string) string {
	q := url.Values{"host": {s.dir}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", User: url.UserPassword("space", s.password), Path: "/" + name,
		RawQuery: q.Encode()}).String()
}

// Dir is the server's directory (its unix socket is there).
func (s *Server) Dir() string { return s.dir }

func (s *Server) exec(ctx context.Context, sql string) error {
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, sql)
	return err
}

// Binaries returns the directory of the newest installed PostgreSQL's
// initdb and postgres.
func Binaries() (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(BinRoot, "*", "bin"))
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL server binaries (initdb, postgres) not found under %s/<version>/bin: "+
		"install Debian's postgresql package (make setup does)", BinRoot)
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Start initialises and starts a server in a new temporary directory.
func Start() (*Server, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, password: randomHex(16), bin: bin, cred: cred}
	if err := s.start(bin, cred); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// serverUser is who the server runs as: the postgres system user when this
// process is root, else this process's own user (nil).
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user to run it as " +
			"(Debian's postgresql package creates it; make setup installs it)")
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Server) start(bin string, cred *syscall.Credential) error {
	data := filepath.Join(s.dir, "data")
	pwfile := filepath.Join(s.dir, "pw")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "space", "--pwfile", pwfile,
		"--auth", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync")
	initdb.Dir, initdb.Env = s.dir, serverEnv()
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v: %s", err, tail(out))
	}
	os.Remove(pwfile)
	return s.launch(ctx)
}

// launch runs the postgres server on the initialised data dir and waits
// until it answers.
func (s *Server) launch(ctx context.Context) error {
	bin, cred, data := s.bin, s.cred, filepath.Join(s.dir, "data")
	logPath := filepath.Join(s.dir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	if cred != nil {
		_ = os.Chown(logPath, int(cred.Uid), int(cred.Gid))
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", s.dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=200",
		"-c", "shared_buffers=32MB")
	cmd.Dir, cmd.Env = s.dir, serverEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The server dies with this process (a killed test leaves no server):
	// the death signal follows the thread that started it, so that thread
	// stays locked to a goroutine until Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	exited, release := make(chan struct{}), make(chan struct{})
	startErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		startErr <- err
		if err != nil {
			return
		}
		go func() { cmd.Wait(); close(exited) }()
		<-release
	}()
	if err := <-startErr; err != nil {
		close(release)
		return fmt.Errorf("start postgres: %w", err)
	}
	if err := s.awaitReady(ctx, exited); err != nil {
		cmd.Process.Kill()
		<-exited
		close(release)
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("postgres did not become ready: %v: %s", err, tail(log))
	}
	s.mu.Lock()
	s.cmd, s.exited, s.release = cmd, exited, release
	s.mu.Unlock()
	return nil
}

// PID is the postmaster's process id (of the current launch).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Exited is closed when the current launch's postmaster has ended (killed,
// for instance, by a test that SIGKILLs it by its PID).
func (s *Server) Exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited == nil { // nothing runs
		done := make(chan struct{})
		close(done)
		return done
	}
	return s.exited
}

// Kill SIGKILLs the whole server, as a crash of its host would: the
// postmaster and every backend it forked (a postmaster killed alone
// leaves its backends serving the connections they have). The postmaster
// is stopped first, so it forks nothing while its children are listed.
// It waits until the postmaster has exited; Restart brings the server
// back.
func (s *Server) Kill() error {
	pid := s.PID()
	if pid == 0 {
		return errors.New("pgtest: no server runs")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgtest: stop postmaster %d: %w", pid, err)
	}
	for _, child := range childrenOf(pid) {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgtest: kill postmaster %d: %w", pid, err)
	}
	select {
	case <-s.Exited():
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("pgtest: postmaster %d did not exit after SIGKILL", pid)
	}
}

// Freeze SIGSTOPs the postmaster and every backend, as a server that
// stops answering without closing its connections (a hung host behind a
// live TCP peer); Thaw SIGCONTs them.
func (s *Server) Freeze() error { return s.signalAll(syscall.SIGSTOP) }

// Thaw undoes Freeze.
func (s *Server) Thaw() error { return s.signalAll(syscall.SIGCONT) }

func (s *Server) signalAll(sig syscall.Signal) error {
	pid := s.PID()
	if pid == 0 {
		return errors.New("pgtest: no server runs")
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("pgtest: signal postmaster %d: %w", pid, err)
	}
	for _, child := range childrenOf(pid) {
		_ = syscall.Kill(child, sig)
	}
	return nil
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		rest := string(b)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		if f := strings.Fields(rest); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// restartTimeout bounds Restart: the backends of a killed postmaster must
// notice its death and exit before a new one may use the data dir.
const restartTimeout = 2 * time.Minute

// Restart starts the server again on the same data dir, socket and
// password after its postmaster died (a crash, or a SIGKILL by its PID),
// as a crashed server is restarted: PostgreSQL recovers from its WAL. It
// waits for the old postmaster to be gone and retries while the dead
// server's backends still hold its shared memory.
func (s *Server) Restart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	select {
	case <-s.Exited():
	case <-ctx.Done():
		return fmt.Errorf("pgtest restart: the running postmaster (pid %d) did not exit", s.PID())
	}
	s.mu.Lock()
	if s.release != nil {
		close(s.release)
	}
	s.cmd, s.exited, s.release = nil, nil, nil
	s.mu.Unlock()
	for {
		err := s.launch(ctx) // a failed launch leaves nothing running
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest restart: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// serverEnv is a small, fixed environment (no PG* variables of the caller).
func serverEnv() []string {
	return []string{"PATH=/usr/bin:/bin", "LANG=C", "LC_ALL=C", "TZ=UTC"}
}

func (s *Server) awaitReady(ctx context.Context, exited <-chan struct{}) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.exec(cctx, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the server exited")
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops the server by its PID (fast shutdown, then SIGKILL after a
// bound) and removes its directory. Safe to call twice.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	defer os.RemoveAll(s.dir)
	s.mu.Lock()
	cmd, exited, release := s.cmd, s.exited, s.release
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	defer close(release)
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
	}
	cmd.Process.Kill()
	<-exited
	return fmt.Errorf("postgres (pid %d) ignored the fast shutdown for %v and was killed", cmd.Process.Pid, stopTimeout)
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
