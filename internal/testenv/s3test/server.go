// Package s3test runs a real S3-compatible object store, SeaweedFS's
// `weed server -s3` (master, volume, filer and S3 gateway in one process),
// on loopback ports with its data in a directory of its own, for the tests
// of internal/objstore and for `make cluster`. The weed binary is built
// from the Go module proxy by scripts/s3-build.sh (make test runs it).
//
// Start is the plain function (no testing import needed by its callers'
// logic); New wraps it for a test, with cleanup. It must not be imported by
// production code.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Options say how to start a server. Binary and DataDir are required.
type Options struct {
	Binary  string // the weed binary (see BinaryPath)
	DataDir string // holds the volumes, the filer's store and weed.log
	// Bucket is created once the server answers (none when empty).
	Bucket string
	// AccessKey and SecretKey are the one identity the server accepts
	// (random when empty).
	AccessKey, SecretKey string
	// ReadyTimeout bounds the wait for the S3 endpoint (default 2 min).
	ReadyTimeout time.Duration
	// Detached leaves the server running when the caller's process dies
	// (make cluster); otherwise the kernel kills it with its parent, so a
	// test binary killed by its timeout leaks no server.
	Detached bool
}

// Server is a running weed process.
type Server struct {
	Endpoint  string // S3 host:port on 127.0.0.1
	AccessKey string
	SecretKey string
	Bucket    string
	DataDir   string
	LogFile   string
	PID       int

	opts     Options
	ports    []int
	grpc     []int // gRPC ports, whose /tmp sockets weed may leave behind
	stopOnce sync.Once
	stopErr  error

	mu     sync.Mutex // guards the current launch (Restart replaces it)
	cmd    *exec.Cmd
	exited chan struct{}
}

// URL is the objstore location of the server's bucket (prefix empty).
func (s *Server) URL() string {
	return "s3://" + s.Bucket + "?" + url.Values{"endpoint": {s.Endpoint}, "tls": {"false"}}.Encode()
}

// Start starts weed and waits until its S3 endpoint answers and the bucket
// exists. Ports are picked free; when one is taken meanwhile, Start tries
// again with others (three times).
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Binary == "" || opts.DataDir == "" {
		return nil, errors.New("s3test: Binary and DataDir are required")
	}
	if _, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("s3test: the weed binary: %v (build it with: bash scripts/s3-build.sh)", err)
	}
	if opts.AccessKey == "" {
		opts.AccessKey = "space" + randomHex(6)
	}
	if opts.SecretKey == "" {
		opts.SecretKey = randomHex(20)
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("s3test: %v", err)
	}
	var lastErr error
	for range 3 {
		s, err := start(ctx, opts)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, opts Options) (*Server, error) {
	ports, err := freePorts(8)
	if err != nil {
		return nil, err
	}
	config := filepath.Join(opts.DataDir, "s3.json")
	if err := writeS3Config(config, opts.AccessKey, opts.SecretKey); err != nil {
		return nil, err
	}
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	s := &Server{
		Endpoint: net.JoinHostPort("127.0.0.1", p(6)), AccessKey: opts.AccessKey, SecretKey: opts.SecretKey,
		Bucket: opts.Bucket, DataDir: opts.DataDir, LogFile: filepath.Join(opts.DataDir, "weed.log"),
		opts: opts, ports: ports, grpc: []int{ports[1], ports[3], ports[5], ports[7]},
	}
	if err := s.launch(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// launch runs weed on the server's ports and data dir and waits until it
// serves.
func (s *Server) launch(ctx context.Context) error {
	opts, ports := s.opts, s.ports
	config := filepath.Join(opts.DataDir, "s3.json")
	log, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("s3test: %v", err)
	}
	defer log.Close()
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	cmd := exec.Command(opts.Binary, "server",
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-dir="+opts.DataDir,
		"-master.port="+p(0), "-master.port.grpc="+p(1),
		"-volume.port="+p(2), "-volume.port.grpc="+p(3),
		"-filer", "-filer.port="+p(4), "-filer.port.grpc="+p(5),
		"-filer.localSocket="+filepath.Join(opts.DataDir, "filer.sock"),
		"-s3", "-s3.port="+p(6), "-s3.port.grpc="+p(7),
		"-s3.localSocket="+filepath.Join(opts.DataDir, "s3.sock"),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.config="+config,
		"-master.telemetry=false",
		"-master.volumeSizeLimitMB=256", "-volume.max=0",
	)
	cmd.Dir = opts.DataDir
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so a signal to the test's group (^C) does
	// not race the orderly stop, and nothing inherits the test's stdin.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !opts.Detached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	// A killed weed leaves its unix sockets; a new one cannot bind them.
	s.removeSockets()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("s3test: start weed: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.PID = cmd, exited, cmd.Process.Pid
	s.mu.Unlock()
	if err := s.waitReady(ctx, opts.ReadyTimeout); err != nil {
		return fmt.Errorf("s3test: weed (log %s): %w", s.LogFile, err)
	}
	return nil
}

// Kill SIGKILLs weed by its PID, as a crash would, and waits until it has
// exited; Restart brings it back.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("s3test: kill weed %d: %w", cmd.Process.Pid, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(15 * time.Second):
		return fmt.Errorf("s3test: weed pid %d did not exit after SIGKILL", cmd.Process.Pid)
	}
}

// Restart starts weed again after it died (Kill, or a crash) on the same
// ports, data dir and credentials, so its clients' endpoint stays valid,
// and waits until it serves the bucket again.
func (s *Server) Restart(ctx context.Context) error {
	select {
	case <-s.Exited():
	default:
		return fmt.Errorf("s3test: weed pid %d still runs", s.PID)
	}
	return s.launch(ctx)
}

func (s *Server) removeSockets() {
	for _, port := range s.grpc {
		for _, name := range []string{"master", "volume", "filer", "s3"} {
			os.Remove(fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", name, port))
		}
	}
	os.Remove(filepath.Join(s.DataDir, "filer.sock"))
	os.Remove(filepath.Join(s.DataDir, "s3.sock"))
}

// waitReady polls the S3 endpoint until it accepts the credentials, then
// creates the bucket.
func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client, err := s.Client()
	if err != nil {
		return err
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var err error
		if s.Bucket == "" {
			_, err = client.ListBuckets(ctx)
		} else {
			err = client.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{})
			if minio.ToErrorResponse(err).Code == "BucketAlreadyOwnedByYou" {
				err = nil
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-s.Exited():
			return errors.New("exited before its S3 endpoint answered")
		case <-ctx.Done():
			return fmt.Errorf("S3 endpoint %s did not answer within %v: %v", s.Endpoint, timeout, err)
		case <-tick.C:
		}
	}
}

// Client is a minio client on the server with its credentials.
func (s *Server) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
		Region:       "us-east-1",
		MaxRetries:   1,
	})
}

// Stop ends the server: SIGTERM, then SIGKILL after 15s. Safe to call
// twice. The data dir stays (its owner removes it).
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.stopErr = s.stop()
		for _, port := range s.grpc {
			for _, name := range []string{"master", "volume", "filer", "s3"} {
				os.Remove(fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", name, port))
			}
		}
	})
	return s.stopErr
}

func (s *Server) stop() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil // already gone
	}
	select {
	case <-exited:
		return nil
	case <-time.After(15 * time.Second):
	}
	cmd.Process.Kill()
	select {
	case <-exited:
		return nil
	case <-time.After(15 * time.Second):
		return fmt.Errorf("s3test: weed pid %d did not exit after SIGKILL", cmd.Process.Pid)
	}
}

// Exited is closed when the current weed process has ended.
func (s *Server) Exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}

func writeS3Config(path, access, secret string) error {
	type cred struct {
		AccessKey string `json:"accessKey"`
		SecretKey string `json:"secretKey"`
	}
	type identity struct {
		Name        string   `json:"name"`
		Credentials []cred   `json:"credentials"`
		Actions     []string `json:"actions"`
	}
	cfg := map[string]any{"identities": []identity{{
		Name: "space", Credentials: []cred{{access, secret}},
		Actions: []string{"Admin", "Read", "Write", "List", "Tagging"},
	}}}
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("s3test: %v", err)
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago,
// below 55535 (weed derives ports by adding 10000 where one is not given).
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("s3test: free port: %v", err)
		}
		ls = append(ls, l)
		if port := l.Addr().(*net.TCPAddr).Port; port < 55535 {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
