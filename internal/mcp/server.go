// Package mcp is SPACE's Model Context Protocol server (`space mcp`): it
// offers sandboxes to any MCP client as tools (create, run, files,
// lifecycle, checkpoints, branches), built on the official Go SDK.
//
// It speaks to spaced only through the public HTTP API via internal/client
// and must import nothing of the server. Over stdio it uses one API key
// (SPACE_API_KEY); over streamable HTTP every caller's bearer token is a
// SPACE key used for that caller's calls, so each caller is its own tenant.
// Whatever fails in a tool call is a tool result with isError and the API's
// message, never a protocol error; on stdio nothing but protocol is written
// to stdout (logs go to stderr).
package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
)

// Version is reported as the server implementation's version.
const Version = "1.0.0"

// Config says which SPACE server the tools call and how.
type Config struct {
	// URL of the SPACE API, e.g. http://127.0.0.1:8080.
	URL string
	// APIKey is used for every call over stdio; over HTTP each caller's
	// bearer token is used instead.
	APIKey string
	// HTTPClient carries the API calls; nil means a default client.
	HTTPClient *http.Client
	// Logger gets diagnostics (never stdout); nil discards them.
	Logger *slog.Logger
	// OutputCap bounds the bytes of each output stream or file content a
	// tool returns; 0 means DefaultOutputCap.
	OutputCap int
}

// DefaultOutputCap is how much of a command's stdout (and of its stderr, and
// of a file) a tool result carries unless Config.OutputCap says otherwise.
const DefaultOutputCap = 64 << 10

// Server is the MCP server with SPACE's tools.
type Server struct {
	cfg Config
	mcp *mcpsdk.Server
}

// New returns a server whose tools call the SPACE API at cfg.URL.
func New(cfg Config) (*Server, error) {
	if _, err := client.New(cfg.URL, "", nil); err != nil {
		return nil, err
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.OutputCap <= 0 {
		cfg.OutputCap = DefaultOutputCap
	}
	s := &Server{cfg: cfg}
	s.mcp = mcpsdk.NewServer(&mcpsdk.Implementation{Name: "space", Title: "SPACE sandboxes", Version: Version},
		&mcpsdk.ServerOptions{
			Logger: cfg.Logger,
			Instructions: "SPACE runs code in isolated microVM sandboxes. Create a sandbox with create_sandbox, " +
				"run commands with run_command (or start_command and read_command_output for long work), move files " +
				"with write_file/read_file/list_files, reach a server in the sandbox with get_preview_url, and delete the sandbox with delete_sandbox when done. " +
				"Paths inside a sandbox are absolute.",
		})
	s.addSandboxTools()
	s.addCommandTools()
	s.addFileTools()
	s.addPortTools()
	return s, nil
}

// ServeStdio serves one MCP session over r and w (stdin and stdout) until
// the client closes it or ctx ends.
func (s *Server) ServeStdio(ctx context.Context, r io.ReadCloser, w io.WriteCloser) error {
	err := s.mcp.Run(ctx, &mcpsdk.IOTransport{Reader: r, Writer: w})
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}

// HTTPHandler serves the streamable HTTP transport. Every request must carry
// "Authorization: Bearer <SPACE key>"; a key the SPACE server refuses gets
// 401. A session stays bound to the key that opened it.
func (s *Server) HTTPHandler() http.Handler {
	h := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s.mcp },
		&mcpsdk.StreamableHTTPOptions{Logger: s.cfg.Logger, SessionTimeout: 30 * time.Minute})
	return auth.RequireBearerToken(s.verifyKey, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

// verifyKey asks the SPACE server whether key is valid (every call, so a
// revoked key stops working at once). The session's user id is a digest of
// the key, so another key cannot take over the session.
func (s *Server) verifyKey(ctx context.Context, key string, _ *http.Request) (*auth.TokenInfo, error) {
	c, err := client.New(s.cfg.URL, key, s.cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.Features(ctx); err != nil {
		if errors.Is(err, errdefs.ErrUnauthenticated) || errors.Is(err, errdefs.ErrPermissionDenied) {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		return nil, err
	}
	sum := sha256.Sum256([]byte(key))
	return &auth.TokenInfo{UserID: "key-" + hex.EncodeToString(sum[:8]), Extra: map[string]any{keyExtra: key}}, nil
}

const keyExtra = "space_api_key"

// clientFor returns the API client for one tool call: the caller's own key
// over HTTP, the configured one over stdio.
func (s *Server) clientFor(req *mcpsdk.CallToolRequest) (*client.Client, error) {
	key := s.cfg.APIKey
	if req != nil && req.Extra != nil && req.Extra.TokenInfo != nil {
		k, _ := req.Extra.TokenInfo.Extra[keyExtra].(string)
		key = k
	}
	if key == "" {
		return nil, errors.New("no SPACE API key: set SPACE_API_KEY (stdio) or send a bearer token (HTTP)")
	}
	return client.New(s.cfg.URL, key, s.cfg.HTTPClient)
}

// toolError turns an API error into the text a model reads: the API's own
// message and code (no Go wrapping), plus the details that help it recover
// (such as the current state after a conflict).
func toolError(err error) error {
	var ae *client.Error
	if !errors.As(err, &ae) {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", ae.Code, ae.Message)
	if st, ok := ae.Details["state"]; ok {
		fmt.Fprintf(&b, " (state: %v)", st)
	}
	return errors.New(b.String())
}
