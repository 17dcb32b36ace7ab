package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// qmpClient speaks the QEMU Machine Protocol: JSON objects, one per line. A
// reader goroutine routes replies to callers by the "id" we send; events are
// dropped (nothing here needs them: process exit is watched directly).
type qmpClient struct {
	conn net.Conn

	writeMu sync.Mutex
	mu      sync.Mutex
	nextID  uint64
	pending map[string]chan qmpReply
	closed  chan struct{}
	readErr error
}

type qmpReply struct {
	ID     json.RawMessage `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
	QMP   *struct {
		Version json.RawMessage `json:"version"`
	} `json:"QMP"`
}

// dialQMP connects to the QMP socket at path, retrying until ctx ends or
// gone is closed (the VMM exited), then negotiates capabilities.
func dialQMP(ctx context.Context, path string, gone <-chan struct{}) (*qmpClient, error) {
	var conn net.Conn
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			conn = c
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp connect: %w (last: %v)", ctxErr(ctx), err)
		case <-gone:
			return nil, fmt.Errorf("qmp connect: vmm exited: %w", errdefs.ErrUnavailable)
		case <-tick.C:
		}
	}
	q := &qmpClient{conn: conn, pending: map[string]chan qmpReply{}, closed: make(chan struct{})}
	br := bufio.NewReaderSize(conn, 64<<10)

	// The greeting comes first; read it synchronously, bounded by ctx.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	line, err := br.ReadBytes('\n')
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w: %v", errdefs.ErrUnavailable, err)
	}
	var greet qmpReply
	if err := json.Unmarshal(line, &greet); err != nil || greet.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: unexpected %q: %w", line, errdefs.ErrInternal)
	}
	_ = conn.SetReadDeadline(time.Time{})
	go q.readLoop(br)
	if err := q.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmpClient) readLoop(br *bufio.Reader) {
	var err error
	for {
		var line []byte
		line, err = br.ReadBytes('\n')
		if err != nil {
			break
		}
		var r qmpReply
		if json.Unmarshal(line, &r) != nil || r.Event != "" || len(r.ID) == 0 {
			continue
		}
		q.mu.Lock()
		ch := q.pending[string(r.ID)]
		delete(q.pending, string(r.ID))
		q.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	q.mu.Lock()
	q.readErr = err
	q.mu.Unlock()
	close(q.closed)
}

// Execute runs one QMP command and decodes its "return" into result (if not nil).
func (q *qmpClient) Execute(ctx context.Context, cmd string, args any, result any) error {
	return q.execute(ctx, cmd, args, result, nil)
}

// SendFile hands QEMU an open file under name (QMP getfd, the fd passed
// as SCM_RIGHTS with the command), for a later "fd:<name>" URI.
func (q *qmpClient) SendFile(ctx context.Context, name string, f *os.File) error {
	return q.execute(ctx, "getfd", map[string]any{"fdname": name}, nil, unix.UnixRights(int(f.Fd())))
}

func (q *qmpClient) execute(ctx context.Context, cmd string, args any, result any, oob []byte) error {
	q.mu.Lock()
	q.nextID++
	id := fmt.Sprintf("%d", q.nextID)
	idJSON, _ := json.Marshal(id)
	ch := make(chan qmpReply, 1)
	q.pending[string(idJSON)] = ch
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		delete(q.pending, string(idJSON))
		q.mu.Unlock()
	}()

	msg := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		msg["arguments"] = args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("qmp %s: %w: %v", cmd, errdefs.ErrInternal, err)
	}
	q.writeMu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		_ = q.conn.SetWriteDeadline(dl)
	}
	if oob != nil {
		uc, ok := q.conn.(*net.UnixConn)
		if !ok {
			err = errors.New("not a unix socket")
		} else {
			_, _, err = uc.WriteMsgUnix(append(b, '\n'), oob, nil)
		}
	} else {
		_, err = q.conn.Write(append(b, '\n'))
	}
	_ = q.conn.SetWriteDeadline(time.Time{})
	q.writeMu.Unlock()
	if err != nil {
		return fmt.Errorf("qmp %s: %w: %v", cmd, errdefs.ErrUnavailable, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return fmt.Errorf("qmp %s: %s: %s: %w", cmd, r.Error.Class, r.Error.Desc, errdefs.ErrFailedPrecondition)
		}
		if result != nil && len(r.Return) > 0 {
			if err := json.Unmarshal(r.Return, result); err != nil {
				return fmt.Errorf("qmp %s: decode: %w: %v", cmd, errdefs.ErrInternal, err)
			}
		}
		return nil
	case <-q.closed:
		return fmt.Errorf("qmp %s: connection closed: %w", cmd, errdefs.ErrUnavailable)
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: %w", cmd, ctxErr(ctx))
	}
}

// Close drops the connection; QEMU keeps running and accepts a new client.
func (q *qmpClient) Close() error {
	if q == nil {
		return nil
	}
	return q.conn.Close()
}

// ctxErr classifies a finished context's error.
func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return errdefs.ErrCancelled
	}
	return errdefs.ErrDeadlineExceeded
}
