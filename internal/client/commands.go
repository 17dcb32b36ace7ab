package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
)

func cmdPath(sandbox, cid string) string {
	return "/v1/sandboxes/" + esc(sandbox) + "/commands/" + esc(cid)
}

// CreateCommand creates a command session (it starts on the first attach).
func (c *Client) CreateCommand(ctx context.Context, sandbox string, req apiv1.CreateCommandRequest, opts ...CallOption) (*apiv1.Command, error) {
	var out apiv1.CommandResponse
	return &out.Command, c.do(ctx, "POST", "/v1/sandboxes/"+esc(sandbox)+"/commands", nil, req, &out, opts...)
}

// GetCommand reads a command session.
func (c *Client) GetCommand(ctx context.Context, sandbox, cid string) (*apiv1.Command, error) {
	var out apiv1.CommandResponse
	return &out.Command, c.do(ctx, "GET", cmdPath(sandbox, cid), nil, nil, &out)
}

// ListCommands lists a sandbox's command sessions.
func (c *Client) ListCommands(ctx context.Context, sandbox string, p Page) (*apiv1.CommandList, error) {
	var out apiv1.CommandList
	return &out, c.do(ctx, "GET", "/v1/sandboxes/"+esc(sandbox)+"/commands", p.values(nil), nil, &out)
}

// Stdin writes r to the command's stdin and closes it when eof is set.
func (c *Client) Stdin(ctx context.Context, sandbox, cid string, r io.Reader, eof bool, opts ...CallOption) error {
	var q url.Values
	if eof {
		q = url.Values{"eof": {"true"}}
	}
	if r == nil {
		r = http.NoBody
	}
	return c.do(ctx, "POST", cmdPath(sandbox, cid)+"/stdin", q, r, nil, opts...)
}

// Signal signals the command's process group, e.g. "SIGTERM".
func (c *Client) Signal(ctx context.Context, sandbox, cid, signal string, opts ...CallOption) error {
	return c.do(ctx, "POST", cmdPath(sandbox, cid)+"/signal", nil, apiv1.SignalRequest{Signal: signal}, nil, opts...)
}

// Resize resizes the command's PTY.
func (c *Client) Resize(ctx context.Context, sandbox, cid string, rows, cols int, opts ...CallOption) error {
	return c.do(ctx, "POST", cmdPath(sandbox, cid)+"/resize", nil, apiv1.ResizeRequest{Rows: rows, Cols: cols}, nil, opts...)
}

// Exec runs a short command to the end and returns its collected output.
func (c *Client) Exec(ctx context.Context, sandbox string, req apiv1.ExecRequest, opts ...CallOption) (*apiv1.ExecResponse, error) {
	var out apiv1.ExecResponse
	return &out, c.do(ctx, "POST", "/v1/sandboxes/"+esc(sandbox)+"/exec", nil, req, &out, opts...)
}

// EventStream reads a command's NDJSON event stream.
type EventStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	// Last is the seq of the last event read: reattach with after=Last.
	Last uint64
}

// Events attaches to a command's events after seq after (0: from the
// start), starting the command on its first attach.
func (c *Client) Events(ctx context.Context, sandbox, cid string, after uint64) (*EventStream, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	resp, err := c.stream(ctx, "GET", cmdPath(sandbox, cid)+"/events", q, nil, WithHeader("Accept", "application/x-ndjson"))
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &EventStream{body: resp.Body, sc: sc, Last: after}, nil
}

// Next returns the next event, skipping heartbeats. An "error" event comes
// back as an *Error. io.EOF means the stream ended: after an exit event that
// is the end; otherwise reattach with after=Last.
func (s *EventStream) Next() (apiv1.Event, error) {
	for s.sc.Scan() {
		var ev apiv1.Event
		if err := json.Unmarshal(s.sc.Bytes(), &ev); err != nil {
			return ev, fmt.Errorf("decode event: %v: %w", err, errdefs.ErrInternal)
		}
		switch ev.Type {
		case apiv1.EventHeartbeat:
			continue
		case apiv1.EventError:
			return ev, &Error{Status: 200, Code: ev.Code, Message: ev.Message}
		}
		if ev.Seq > s.Last {
			s.Last = ev.Seq
		}
		return ev, nil
	}
	if err := s.sc.Err(); err != nil {
		return apiv1.Event{}, fmt.Errorf("read events: %v: %w", err, errdefs.ErrUnavailable)
	}
	return apiv1.Event{}, io.EOF
}

// Close ends the stream (the command keeps running).
func (s *EventStream) Close() error { return s.body.Close() }
