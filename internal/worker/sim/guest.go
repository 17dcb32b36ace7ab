package sim

import (
	"bytes"
	"context"
	"io"
	"sort"
	"sync"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// guestState is what a simulated VM holds: its files and processes. It is
// copied whole into checkpoints and suspends.
type guestState struct {
	mu      sync.Mutex
	fs      *memFS
	procs   map[string]*proc
	nextPID int
}

func newGuestState(diskBytes int64) *guestState {
	return &guestState{fs: newFS(diskBytes), procs: map[string]*proc{}, nextPID: 100}
}

// clone is a copy: frozen for a checkpoint or a suspend, running for a
// branch, a restore or a wake (proc.clone).
func (g *guestState) clone(frozen bool) *guestState {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := &guestState{fs: g.fs.clone(), procs: make(map[string]*proc, len(g.procs)), nextPID: g.nextPID}
	for id, p := range g.procs {
		c.procs[id] = p.clone(frozen)
	}
	return c
}

// stop ends the timers of every process (the VM is gone).
func (g *guestState) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.procs {
		p.stop()
	}
}

func (g *guestState) usedBytes() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fs.used
}

// guest is the worker.Guest of one simulated sandbox. It looks its state
// up on every call, so it stays valid across suspend, wake and restore.
type guest struct {
	w  *Worker
	id string
}

var _ worker.Guest = (*guest)(nil)

// state is the sandbox's guest, or why no call reaches it now.
func (h *guest) state() (*guestState, <-chan struct{}, error) {
	return h.w.guestOf(h.id)
}

func (h *guest) proc(id string) (*proc, error) {
	g, _, err := h.state()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.procs[id]
	if !ok {
		return nil, errdefs.New(errdefs.ErrNotFound, "process %s not found", id)
	}
	return p, nil
}

func (h *guest) Start(ctx context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error) {
	g, _, err := h.state()
	if err != nil {
		return agentproto.ProcessInfo{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.procs[spec.ID]; dup {
		return agentproto.ProcessInfo{}, errdefs.New(errdefs.ErrConflict, "process %s exists", spec.ID)
	}
	g.nextPID++
	p, err := startProc(spec, g.nextPID, func() *memFS { return g.fs })
	if err != nil {
		return agentproto.ProcessInfo{}, err
	}
	g.procs[spec.ID] = p
	return p.get(), nil
}

func (h *guest) Events(ctx context.Context, id string, after uint64) (agentproto.EventStream, error) {
	p, err := h.proc(id)
	if err != nil {
		return nil, err
	}
	_, gone, err := h.state()
	if err != nil {
		return nil, err
	}
	return &stream{p: p, after: after, done: ctx.Done(), gone: gone, closed: make(chan struct{}), err: ctx.Err}, nil
}

func (h *guest) Stdin(ctx context.Context, id string, data []byte, eof bool) error {
	p, err := h.proc(id)
	if err != nil {
		return err
	}
	return p.stdin(data, eof)
}

func (h *guest) Signal(ctx context.Context, id, signal string) error {
	p, err := h.proc(id)
	if err != nil {
		return err
	}
	return p.signal(signal)
}

func (h *guest) Resize(ctx context.Context, id string, rows, cols uint16) error {
	p, err := h.proc(id)
	if err != nil {
		return err
	}
	if p.spec.PTY == nil {
		return errdefs.New(errdefs.ErrFailedPrecondition, "process %s has no terminal", id)
	}
	return nil
}

func (h *guest) Get(ctx context.Context, id string) (agentproto.ProcessInfo, error) {
	p, err := h.proc(id)
	if err != nil {
		return agentproto.ProcessInfo{}, err
	}
	return p.get(), nil
}

func (h *guest) List(ctx context.Context) ([]agentproto.ProcessInfo, error) {
	g, _, err := h.state()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	procs := make([]*proc, 0, len(g.procs))
	for _, p := range g.procs {
		procs = append(procs, p)
	}
	g.mu.Unlock()
	out := make([]agentproto.ProcessInfo, 0, len(procs))
	for _, p := range procs {
		out = append(out, p.get())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// files runs f on the guest's filesystem under its lock.
func (h *guest) files(f func(fs *memFS) error) error {
	g, _, err := h.state()
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return f(g.fs)
}

func (h *guest) ReadFile(ctx context.Context, path string) (io.ReadCloser, agentproto.FileInfo, error) {
	var data []byte
	var fi agentproto.FileInfo
	err := h.files(func(fs *memFS) (err error) { data, fi, err = fs.read(path); return err })
	if err != nil {
		return nil, agentproto.FileInfo{}, err
	}
	return io.NopCloser(bytes.NewReader(data)), fi, nil
}

// readBounded reads r whole, refusing more than the guest's disk holds.
func (h *guest) readBounded(r io.Reader, extra int64) ([]byte, error) {
	g, _, err := h.state()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	limit := g.fs.limit + extra
	g.mu.Unlock()
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, "upload ended: %v", err)
	}
	if int64(len(data)) > limit {
		return nil, errdefs.New(errdefs.ErrResourceExhausted, "no space left on the guest's disk")
	}
	return data, nil
}

func (h *guest) WriteFile(ctx context.Context, path string, mode uint32, size int64, r io.Reader) (agentproto.FileInfo, error) {
	data, err := h.readBounded(r, 0)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	if size > 0 && int64(len(data)) != size {
		return agentproto.FileInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "upload of %d bytes carried %d: discarded", size, len(data))
	}
	var fi agentproto.FileInfo
	err = h.files(func(fs *memFS) (err error) { fi, err = fs.write(path, mode, data); return err })
	return fi, err
}

func (h *guest) ListDir(ctx context.Context, path string) ([]agentproto.FileInfo, error) {
	var out []agentproto.FileInfo
	err := h.files(func(fs *memFS) (err error) { out, err = fs.listDir(path); return err })
	return out, err
}

func (h *guest) Stat(ctx context.Context, path string) (agentproto.FileInfo, error) {
	var fi agentproto.FileInfo
	err := h.files(func(fs *memFS) (err error) { fi, err = fs.stat(path); return err })
	return fi, err
}

func (h *guest) Delete(ctx context.Context, path string, recursive bool) error {
	return h.files(func(fs *memFS) error { return fs.remove(path, recursive) })
}

func (h *guest) TarOut(ctx context.Context, path string) (io.ReadCloser, error) {
	var archive []byte
	if err := h.files(func(fs *memFS) (err error) { archive, err = fs.tarOut(path); return err }); err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(archive)), nil
}

// tarOverhead is what an archive may carry beyond its files' bytes
// (headers and padding) before TarIn refuses it unread.
const tarOverhead = 1 << 20

func (h *guest) TarIn(ctx context.Context, path string, r io.Reader) error {
	archive, err := h.readBounded(r, tarOverhead)
	if err != nil {
		return err
	}
	return h.files(func(fs *memFS) error { return fs.tarIn(path, bytes.NewReader(archive)) })
}
