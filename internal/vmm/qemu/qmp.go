package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	r := newQMPReader(conn)

	// The greeting comes first; read it synchronously, bounded by ctx.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	greet, err := r.next()
	switch {
	case errors.Is(err, errQMPLine):
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w: %w", err, errdefs.ErrInternal)
	case err != nil:
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w: %v", errdefs.ErrUnavailable, err)
	case greet.QMP == nil:
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: not a greeting: %w", errdefs.ErrInternal)
	}
	_ = conn.SetReadDeadline(time.Time{})
	go q.readLoop(r)
	if err := q.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmpClient) readLoop(rd *qmpReader) {
	var err error
	for {
		var r qmpReply
		r, err = rd.next()
		if errors.Is(err, errQMPLine) {
			continue // not a reply; QMP says each line is one, but QEMU is not ours to trust
		}
		if err != nil {
			// A line too long (or the end): the connection cannot be
			// read on, and QEMU sees its client leave.
			_ = q.conn.Close()
			break
		}
		if r.Event != "" || len(r.ID) == 0 {
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
		q.mu.Lock()
		rerr := q.readErr
		q.mu.Unlock()
		return fmt.Errorf("qmp %s: connection closed: %w: %v", cmd, errdefs.ErrUnavailable, rerr)
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: %w", cmd, ctxErr(ctx))
	}
}

// qmpMaxLine bounds one line from QEMU. Replies to the commands here are
// small (the largest, human-monitor-command's text, is kilobytes); the
// bound is what a compromised QEMU can make spaced buffer.
const qmpMaxLine = 1 << 20

// errQMPLine is a line that is not one JSON object: skipped after the
// greeting.
var errQMPLine = errors.New("qmp line is not a JSON object")

// qmpReader reads QMP's lines, each one JSON object, none longer than
// qmpMaxLine.
type qmpReader struct{ sc *bufio.Scanner }

func newQMPReader(r io.Reader) *qmpReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), qmpMaxLine)
	return &qmpReader{sc: sc}
}

// next reads one line: its reply, errQMPLine for a line that is not a
// JSON object, io.EOF at the end, or the error that ends the stream (a
// line over qmpMaxLine among them).
func (r *qmpReader) next() (qmpReply, error) {
	if !r.sc.Scan() {
		err := r.sc.Err()
		switch {
		case err == nil:
			return qmpReply{}, io.EOF
		case errors.Is(err, bufio.ErrTooLong):
			return qmpReply{}, fmt.Errorf("qmp: a line from QEMU longer than %d bytes: %w", qmpMaxLine, err)
		}
		return qmpReply{}, err
	}
	var reply qmpReply
	if err := json.Unmarshal(r.sc.Bytes(), &reply); err != nil {
		return qmpReply{}, fmt.Errorf("%w: %v", errQMPLine, err)
	}
	return reply, nil
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
