// Package pgtest gives tests a real, private PostgreSQL: Debian's server
// binaries (package postgresql), started once per test process in a
// temporary directory owned by the postgres system user (PostgreSQL refuses
// to run as root), listening only on a unix socket there, with password
// authentication and fsync off. Each test gets a database of its own.
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
	cmd      *exec.Cmd
	exited   chan struct{}
	release  chan struct{} // ends the goroutine whose thread started the server
	stopOnce sync.Once
	stopErr  error
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
	s := &Server{dir: dir, password: randomHex(16), exited: make(chan struct{}), release: make(chan struct{})}
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

	logPath := filepath.Join(s.dir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", s.dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200",
		"-c", "shared_buffers=32MB")
	s.cmd.Dir, s.cmd.Env = s.dir, serverEnv()
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// The server dies with this process (a killed test leaves no server):
	// the death signal follows the thread that started it, so that thread
	// stays locked to a goroutine until Stop.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	startErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := s.cmd.Start()
		startErr <- err
		if err != nil {
			return
		}
		go func() { s.cmd.Wait(); close(s.exited) }()
		<-s.release
	}()
	if err := <-startErr; err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	if err := s.awaitReady(ctx); err != nil {
		s.Stop()
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("postgres did not become ready: %v: %s", err, tail(log))
	}
	return nil
}

// serverEnv is a small, fixed environment (no PG* variables of the caller).
func serverEnv() []string {
	return []string{"PATH=/usr/bin:/bin", "LANG=C", "LC_ALL=C", "TZ=UTC"}
}

func (s *Server) awaitReady(ctx context.Context) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.exec(cctx, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
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
	defer close(s.release)
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	s.cmd.Process.Kill()
	<-s.exited
	return fmt.Errorf("postgres (pid %d) ignored the fast shutdown for %v and was killed", s.cmd.Process.Pid, stopTimeout)
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
