package local_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/s3test"
	"github.com/space-sandbox/space/internal/worker"
)

// TestSuspendWakeElsewhere: two workers with their own data dirs share a
// real object store (SeaweedFS). A sandbox suspended on A wakes on B with
// its files and a running process intact; an upload cut half-way fails the
// suspend and leaves the sandbox running and nothing under its name; a
// damaged chunk fails the wake with data_loss and leaves no VM.
func TestSuspendWakeElsewhere(t *testing.T) {
	srv := s3test.New(t, "space-roam")
	prefix := "roam-" + strings.ToLower(rand.Text()[:10])
	direct := openRoamStore(t, srv, srv.Endpoint, prefix)
	proxy := newCutProxy(t, srv.Endpoint)

	eA, eB := newEnv(t), newEnv(t)
	for _, e := range []*env{eA, eB} {
		cache, err := objstore.OpenCache(filepath.Join(e.cfg.Storage.Root(), "objcache"), 2<<30, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.cfg.PoolSize = -1
		e.cfg.DisableSnapshots = true // one cold boot, no template snapshot to make
		e.cfg.Snapshots = objstore.Snapshots{Store: openRoamStore(t, srv, proxy.addr(), prefix), Cache: cache}
	}
	ctx := context.Background()
	wA, wB := eA.open(), eB.open()
	defer func() { cleanupAll(t, wA); cleanupAll(t, wB) }()
	const id = "sbx_roam"
	name := worker.SuspendSnapshot(id)

	must(wA.CreateSandbox(ctx, spec(id)))(t)
	cA := agent(t, wA, id)
	data := writeRandom(t, cA, "/root/data", 1<<20)
	startCounter(t, cA)

	t.Run("an upload cut half-way fails the suspend; the sandbox goes on", func(t *testing.T) {
		before := count(t, cA)
		stop := cutAtFirstChunk(t, srv, prefix, proxy)
		_, err := wA.SuspendSandbox(ctx, id)
		stop()
		proxy.heal()
		if errdefs.ClassOf(err) != errdefs.ErrUnavailable {
			t.Fatalf("suspend with the store cut: %v (class %v), want unavailable", err, errdefs.ClassOf(err))
		}
		if !proxy.wasCut() {
			t.Fatal("the proxy was never cut: the test did not exercise a cut upload")
		}
		wantState(t, wA, id, worker.VMRunning)
		waitCount(t, cA, before)
		if _, err := direct.StatSnapshot(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("after a cut upload the name has: %v, want not found", err)
		}
	})

	var before int
	t.Run("suspend on A, delete on A, wake on B", func(t *testing.T) {
		before = count(t, cA)
		st := must(wA.SuspendSandbox(ctx, id))(t)
		if st.State != worker.VMSuspended {
			t.Fatalf("after suspend: %+v", st)
		}
		m := must(direct.StatSnapshot(ctx, name))(t)
		if !bytes.Contains(m.Meta, []byte(`"ID":"`+id+`"`)) || !bytes.Contains(m.Meta, []byte(`"MemoryMiB":256`)) {
			t.Fatalf("the snapshot's meta does not carry the spec: %s", m.Meta)
		}
		if err := wA.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := wA.Sandbox(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("A still has it: %v", err)
		}
		must(direct.StatSnapshot(ctx, name))(t) // the object outlives A's copy

		st = must(wB.CreateSandbox(ctx, worker.SandboxSpec{ID: id, FromSnapshot: name}))(t)
		if st.State != worker.VMRunning || !st.Restored || st.Spec.MemoryMiB != 256 || st.Spec.Template != "base" {
			t.Fatalf("woken on B: %+v", st)
		}
		cB := agent(t, wB, id)
		checkFile(t, cB, "/root/data", data)
		if after := waitCount(t, cB, before); after < before {
			t.Fatalf("counter went back: %d then %d", before, after)
		}
		count(t, cB) // the same process, still running
		testenv.Eventually(t, 30*time.Second, func() error {
			if _, err := direct.StatSnapshot(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
				return errors.New("the served snapshot is still stored")
			}
			return nil
		})
	})

	t.Run("a missing snapshot is not found and leaves nothing", func(t *testing.T) {
		_, err := wA.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_none", FromSnapshot: worker.SuspendSnapshot("sbx_none")})
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("wake of a snapshot never stored: %v", err)
		}
		if _, err := wA.Sandbox(ctx, "sbx_none"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("left behind: %v", err)
		}
	})

	t.Run("a damaged chunk fails the wake with data_loss and no VM", func(t *testing.T) {
		must(wB.SuspendSandbox(ctx, id))(t)
		if err := wB.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		damageChunk(t, srv, prefix+"/chunks/"+must(direct.StatSnapshot(ctx, name))(t).Upload)
		_, err := wA.CreateSandbox(ctx, worker.SandboxSpec{ID: id, FromSnapshot: name})
		if !errors.Is(err, errdefs.ErrDataLoss) {
			t.Fatalf("wake from a damaged snapshot: %v, want data_loss", err)
		}
		if _, err := wA.Sandbox(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("A kept the failed sandbox: %v", err)
		}
		if sbs := must(wA.Sandboxes(ctx))(t); len(sbs) != 0 {
			t.Fatalf("A holds %+v", sbs)
		}
		must(direct.StatSnapshot(ctx, name))(t) // kept for inspection
		if err := (objstore.Snapshots{Store: direct}).Delete(ctx, name); err != nil {
			t.Fatal(err)
		}
	})
}

func openRoamStore(t *testing.T, srv *s3test.Server, endpoint, prefix string) *objstore.Store {
	t.Helper()
	loc, err := objstore.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	loc.Endpoint, loc.Prefix = endpoint, prefix
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := objstore.Open(ctx, loc, objstore.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey},
		objstore.Options{ChunkSize: 1 << 20, Parallel: 2, MaxRetries: 1, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// chunkKeys lists the chunk objects under prefix, straight from the server.
func chunkKeys(t *testing.T, srv *s3test.Server, prefix string) []string {
	t.Helper()
	keys, err := listChunks(srv, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func listChunks(srv *s3test.Server, prefix string) ([]string, error) {
	return listKeys(srv, prefix+"/chunks/")
}

func listKeys(srv *s3test.Server, prefix string) ([]string, error) {
	client, err := srv.Client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	for obj := range client.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, obj.Err
		}
		keys = append(keys, obj.Key)
	}
	return keys, nil
}

// cutAtFirstChunk cuts the proxy, in the background, as soon as the bucket
// holds a chunk under prefix (none may be there before). The returned
// function stops the watch and waits for it.
func cutAtFirstChunk(t *testing.T, srv *s3test.Server, prefix string, p *cutProxy) func() {
	t.Helper()
	if n := len(chunkKeys(t, srv, prefix)); n != 0 {
		t.Fatalf("%d chunks stored before the upload", n)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			if keys, err := listChunks(srv, prefix); err == nil && len(keys) > 0 {
				p.cut()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() { close(quit); <-done }
}

// damageChunk overwrites the first chunk under prefix (an upload's chunk
// prefix) with other bytes of the same length.
func damageChunk(t *testing.T, srv *s3test.Server, prefix string) {
	t.Helper()
	keys, err := listKeys(srv, prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no chunk to damage")
	}
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obj, err := client.GetObject(ctx, srv.Bucket, keys[0], minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || len(b) == 0 {
		t.Fatalf("read chunk %s: %d bytes, %v", keys[0], len(b), err)
	}
	for i := range b {
		b[i] ^= 0x5a
	}
	if _, err := client.PutObject(ctx, srv.Bucket, keys[0], bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// cutProxy forwards TCP to the object store until cut: then it resets
// every open connection and refuses new ones until healed — the store
// gone from the worker's view mid-upload.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	ever  bool
	conns map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		if !down {
			p.conns[c] = true
		}
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		go p.forward(c)
	}
}

func (p *cutProxy) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = true
	p.mu.Unlock()
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down, p.ever = true, true
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not a clean close
		}
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *cutProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

func (p *cutProxy) wasCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ever
}
