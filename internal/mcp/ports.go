package mcp

import (
	"context"
	"fmt"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
)

// PortsResult is list_ports' result.
type PortsResult struct {
	Ports []PortInfo `json:"ports"`
}

// PortInfo is one listening port.
type PortInfo struct {
	Port    int    `json:"port"`
	Address string `json:"address" jsonschema:"the listening address in the guest: 0.0.0.0, ::, 127.0.0.1"`
}

// PreviewURLArgs are get_preview_url's arguments.
type PreviewURLArgs struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"sandbox id (sbx_…)"`
	Port       int    `json:"port" jsonschema:"the TCP port a server listens on inside the sandbox (1-65535)"`
	Public     bool   `json:"public,omitempty" jsonschema:"a URL anyone may open without a token (default false: private)"`
	TTLSeconds int    `json:"ttl_seconds,omitempty" jsonschema:"how long the URL works, in seconds (default: the server's, 3600)"`
}

// PreviewURL is get_preview_url's result.
type PreviewURL struct {
	URL         string    `json:"url"`
	Token       string    `json:"token,omitempty" jsonschema:"for a private URL: send it as the X-Space-Port-Token header"`
	BrowserURL  string    `json:"browser_url,omitempty" jsonschema:"for a private URL: opening it once in a browser sets a cookie for the URL's host"`
	ExpiresAt   time.Time `json:"expires_at"`
	Public      bool      `json:"public"`
	TokenHeader string    `json:"token_header,omitempty"`
}

func (s *Server) addPortTools() {
	addTool(s, &mcpsdk.Tool{Name: "list_ports",
		Description: "List the TCP ports servers listen on inside a running sandbox (use get_preview_url to reach one).",
		Annotations: annotations("List ports", true, false, true, false)},
		func(ctx context.Context, c *client.Client, in SandboxIDArgs) (PortsResult, error) {
			if err := needID("sandbox_id", in.SandboxID); err != nil {
				return PortsResult{}, err
			}
			l, err := c.ListPorts(ctx, in.SandboxID)
			if err != nil {
				return PortsResult{}, err
			}
			out := PortsResult{Ports: []PortInfo{}}
			for _, p := range l.Ports {
				out.Ports = append(out.Ports, PortInfo{Port: p.Port, Address: p.Address})
			}
			return out, nil
		})

	addTool(s, &mcpsdk.Tool{Name: "get_preview_url",
		Description: "Get an HTTP(S) URL that reaches a server listening on a port inside a sandbox (web apps, notebooks, APIs; " +
			"WebSockets work). A private URL (the default) needs its token as the X-Space-Port-Token header, or its " +
			"browser_url opened once; public: true makes one anyone may open. The URL expires at expires_at.",
		Annotations: annotations("Get preview URL", false, false, false, false)},
		func(ctx context.Context, c *client.Client, in PreviewURLArgs) (PreviewURL, error) {
			if err := needID("sandbox_id", in.SandboxID); err != nil {
				return PreviewURL{}, err
			}
			if in.Port < 1 || in.Port > 65535 {
				return PreviewURL{}, fmt.Errorf("invalid_argument: port must be 1-65535, not %d", in.Port)
			}
			if in.TTLSeconds < 0 {
				return PreviewURL{}, fmt.Errorf("invalid_argument: ttl_seconds must be positive, not %d", in.TTLSeconds)
			}
			u, err := idempotent(ctx, func(o ...client.CallOption) (*apiv1.PortURL, error) {
				return c.CreatePortURL(ctx, in.SandboxID, in.Port, in.Public, time.Duration(in.TTLSeconds)*time.Second, o...)
			})
			if err != nil {
				return PreviewURL{}, err
			}
			out := PreviewURL{URL: u.URL, Token: u.Token, ExpiresAt: u.ExpiresAt, Public: u.Token == ""}
			if u.Token != "" {
				out.TokenHeader = client.PortTokenHeader
				out.BrowserURL = client.BrowserURL(u)
			}
			return out, nil
		})
}
