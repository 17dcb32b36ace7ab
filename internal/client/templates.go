package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
)

// BuildTemplate starts a template build; poll (or WaitOperation) the
// returned operation and follow BuildLog.
func (c *Client) BuildTemplate(ctx context.Context, req apiv1.CreateTemplateRequest, opts ...CallOption) (*apiv1.TemplateAndOperation, error) {
	var out apiv1.TemplateAndOperation
	return &out, c.do(ctx, "POST", "/v1/templates", nil, req, &out, opts...)
}

// GetTemplate returns a template: ref is "name" (its newest ready build)
// or "name@sha256:…".
func (c *Client) GetTemplate(ctx context.Context, ref string) (*apiv1.Template, error) {
	var out apiv1.Template
	return &out, c.do(ctx, "GET", "/v1/templates/"+esc(ref), nil, nil, &out)
}

// DeleteTemplate deletes every build of a template (ref "name") or one
// ("name@sha256:…"); force deletes it even while it is in use.
func (c *Client) DeleteTemplate(ctx context.Context, ref string, force bool) error {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	return c.do(ctx, "DELETE", "/v1/templates/"+esc(ref), q, nil, nil)
}

// BuildLogStream reads a template build's log events.
type BuildLogStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	// Last is the seq of the last event read: reattach with after=Last.
	Last uint64
}

// BuildLog attaches to the log of build operation op of template name,
// from the line after seq after (0: from the start).
func (c *Client) BuildLog(ctx context.Context, name, op string, after uint64) (*BuildLogStream, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	resp, err := c.stream(ctx, "GET", "/v1/templates/"+esc(name)+"/builds/"+esc(op)+"/log", q, nil,
		WithHeader("Accept", "application/x-ndjson"))
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &BuildLogStream{body: resp.Body, sc: sc, Last: after}, nil
}

// Next returns the next log or end event, skipping heartbeats. An "error"
// event comes back as an *Error. io.EOF after an "end" event is the end;
// otherwise reattach with after=Last.
func (s *BuildLogStream) Next() (apiv1.BuildLogEvent, error) {
	for s.sc.Scan() {
		var ev apiv1.BuildLogEvent
		if err := json.Unmarshal(s.sc.Bytes(), &ev); err != nil {
			return ev, fmt.Errorf("decode build log event: %v: %w", err, errdefs.ErrInternal)
		}
		switch ev.Type {
		case apiv1.EventHeartbeat:
			continue
		case apiv1.BuildLogError:
			return ev, &Error{Status: 200, Code: ev.Code, Message: ev.Message}
		}
		if ev.Seq > s.Last {
			s.Last = ev.Seq
		}
		return ev, nil
	}
	if err := s.sc.Err(); err != nil {
		return apiv1.BuildLogEvent{}, fmt.Errorf("read build log: %v: %w", err, errdefs.ErrUnavailable)
	}
	return apiv1.BuildLogEvent{}, io.EOF
}

// Close ends the stream (the build goes on).
func (s *BuildLogStream) Close() error { return s.body.Close() }
