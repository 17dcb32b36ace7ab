package firecracker

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// TestVsockHandshake: the host side of Firecracker's hybrid vsock
// (CONNECT <port>, OK <n>) against the answers a vsock socket can give.
func TestVsockHandshake(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		ok           bool
	}{
		{"accepted", "OK 1073741824\nhello\n", true},
		{"refused: closed", "", false},
		{"garbage", "NOPE\n", false},
		{"bad port", "OK x\n", false},
		{"no newline", "OK 1073741824", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "v.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			got := make(chan string, 4)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					line, _ := bufio.NewReader(c).ReadString('\n')
					select {
					case got <- line:
					default: // the test reads the first only
					}
					_, _ = c.Write([]byte(tc.answer))
					if tc.ok {
						defer c.Close()
						continue
					}
					c.Close()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			c, err := dialVsock(ctx, sock, 1024)
			if line := <-got; line != "CONNECT 1024\n" {
				t.Errorf("host sent %q", line)
			}
			if !tc.ok {
				if !errors.Is(err, errdefs.ErrUnavailable) {
					t.Fatalf("dialVsock = %v, want unavailable once ctx ends", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Nothing after the OK line was consumed by the handshake.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || strings.TrimSpace(line) != "hello" {
				t.Errorf("first bytes from the guest = %q, %v", line, err)
			}
		})
	}
}
