package client

import (
	"errors"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
)

func TestBrowserURL(t *testing.T) {
	for _, tc := range []struct{ url, token, want string }{
		{"http://8080-sbx_1.localhost:8080/", "", "http://8080-sbx_1.localhost:8080/"},
		{"http://8080-sbx_1.localhost:8080/", "a+b/c", "http://8080-sbx_1.localhost:8080/?space_token=a%2Bb%2Fc"},
		{"https://3000-sbx_1.preview.example/?x=1", "t", "https://3000-sbx_1.preview.example/?x=1&space_token=t"},
	} {
		if got := BrowserURL(&apiv1.PortURL{URL: tc.url, Token: tc.token}); got != tc.want {
			t.Errorf("BrowserURL(%q, %q) = %q, want %q", tc.url, tc.token, got, tc.want)
		}
	}
}

// TestCreatePortURLRefusesBadPorts: a port outside 1-65535 never leaves
// the client (there is no server at this address to answer).
func TestCreatePortURLRefusesBadPorts(t *testing.T) {
	c, err := New("http://127.0.0.1:1", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{0, -1, 65536} {
		if _, err := c.CreatePortURL(t.Context(), "sbx_1", p, false, 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("port %d: %v, want invalid_argument", p, err)
		}
	}
}
