// Package client is the Go client of SPACE's HTTP API (v1), used by the CLI
// and the tests. Error answers come back as *Error values that wrap the
// errdefs class of their code, so errors.Is(err, errdefs.ErrNotFound) works
// on this side just as on the server.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
)

// DefaultURL is where a single-node server listens by default.
const DefaultURL = "http://127.0.0.1:8080"

// Client calls one SPACE server.
type Client struct {
	base *url.URL
	key  string
	hc   *http.Client
}

// New returns a client of the server at baseURL authenticating with apiKey.
// hc may be nil (a client without a global timeout: event streams are long).
func New(baseURL, apiKey string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: must be http(s)://host[:port]: %w", baseURL, errdefs.ErrInvalidArgument)
	}
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: u, key: apiKey, hc: hc}, nil
}

// FromEnv returns a client configured by SPACE_URL (default DefaultURL) and
// SPACE_API_KEY.
func FromEnv() (*Client, error) {
	u := os.Getenv("SPACE_URL")
	if u == "" {
		u = DefaultURL
	}
	return New(u, os.Getenv("SPACE_API_KEY"), nil)
}

// Error is an error answer of the server.
type Error struct {
	Status    int
	Code      string
	Message   string
	Details   map[string]any
	RequestID string
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s (%s, HTTP %d)", msg, e.Code, e.Status)
}

// Unwrap returns the errdefs class of the code.
func (e *Error) Unwrap() error { return errdefs.FromCode(e.Code) }

// CallOption changes one request.
type CallOption func(*http.Request)

// WithIdempotencyKey sends Idempotency-Key: a repeat with the same key and
// body gets the first answer and does not act twice.
func WithIdempotencyKey(key string) CallOption {
	return func(r *http.Request) { r.Header.Set("Idempotency-Key", key) }
}

// WithHeader sets a request header.
func WithHeader(k, v string) CallOption {
	return func(r *http.Request) { r.Header.Set(k, v) }
}

// request builds a request; body is JSON-encoded unless it is an io.Reader.
func (c *Client) request(ctx context.Context, method, path string, q url.Values, body any, opts []CallOption) (*http.Request, error) {
	u := *c.base
	u.Path = c.base.Path + path
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd, ctype = b, "application/octet-stream"
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("encode request: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		rd, ctype = bytes.NewReader(buf), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	for _, o := range opts {
		o(req)
	}
	return req, nil
}

// send performs req and returns the response when its status is 2xx.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			if errors.Is(ctxErr, context.DeadlineExceeded) {
				return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, errdefs.ErrDeadlineExceeded)
			}
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, errdefs.ErrCancelled)
		}
		return nil, fmt.Errorf("%s %s: %v: %w", req.Method, req.URL.Path, err, errdefs.ErrUnavailable)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

func decodeError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb apiv1.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message, e.Details = eb.Error.Code, eb.Error.Message, eb.Error.Details
		return e
	}
	e.Code = codeOfStatus(resp.StatusCode)
	e.Message = http.StatusText(resp.StatusCode)
	return e
}

// codeOfStatus classifies an answer that carries no error body (a proxy's,
// say) by its status.
func codeOfStatus(status int) string {
	switch status {
	case 400:
		return errdefs.ErrInvalidArgument.Code()
	case 401:
		return errdefs.ErrUnauthenticated.Code()
	case 403:
		return errdefs.ErrPermissionDenied.Code()
	case 404:
		return errdefs.ErrNotFound.Code()
	case 409:
		return errdefs.ErrConflict.Code()
	case 412:
		return errdefs.ErrFailedPrecondition.Code()
	case 413:
		return errdefs.ErrPayloadTooLarge.Code()
	case 429:
		return errdefs.ErrResourceExhausted.Code()
	case 502, 503:
		return errdefs.ErrUnavailable.Code()
	case 504:
		return errdefs.ErrDeadlineExceeded.Code()
	}
	return errdefs.ErrInternal.Code()
}

// do sends a request and decodes a JSON answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any, opts ...CallOption) error {
	req, err := c.request(ctx, method, path, q, body, opts)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %v: %w", method, path, err, errdefs.ErrInternal)
	}
	return nil
}

// stream sends a request and returns the body of a 2xx answer.
func (c *Client) stream(ctx context.Context, method, path string, q url.Values, body any, opts ...CallOption) (*http.Response, error) {
	req, err := c.request(ctx, method, path, q, body, opts)
	if err != nil {
		return nil, err
	}
	return c.send(req)
}

func esc(s string) string { return url.PathEscape(s) }
