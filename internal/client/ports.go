package client

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
)

// PortTokenHeader carries a private preview URL's token.
const PortTokenHeader = "X-Space-Port-Token"

// ListPorts lists the TCP ports listening inside a running sandbox.
func (c *Client) ListPorts(ctx context.Context, sandbox string) (*apiv1.PortList, error) {
	var out apiv1.PortList
	return &out, c.do(ctx, "GET", "/v1/sandboxes/"+esc(sandbox)+"/ports", nil, nil, &out)
}

// CreatePortURL makes a preview URL of a sandbox's port: private (it needs
// the answer's token or the owner's key) unless public; ttl 0 takes the
// server's default.
func (c *Client) CreatePortURL(ctx context.Context, sandbox string, port int, public bool, ttl time.Duration, opts ...CallOption) (*apiv1.PortURL, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: must be 1-65535: %w", port, errdefs.ErrInvalidArgument)
	}
	req := apiv1.CreatePortURLRequest{Public: public}
	if ttl > 0 {
		req.TTLSeconds = int((ttl + time.Second - 1) / time.Second)
	}
	var out apiv1.PortURL
	return &out, c.do(ctx, "POST", "/v1/sandboxes/"+esc(sandbox)+"/ports/"+strconv.Itoa(port)+"/urls", nil, req, &out, opts...)
}

// BrowserURL is a private URL with its token as ?space_token=: opened once,
// the server trades it for an HttpOnly cookie of the URL's host and
// redirects to the plain URL. A public URL is returned as it is.
func BrowserURL(u *apiv1.PortURL) string {
	if u.Token == "" {
		return u.URL
	}
	sep := "?"
	if strings.Contains(u.URL, "?") {
		sep = "&"
	}
	return u.URL + sep + "space_token=" + url.QueryEscape(u.Token)
}
