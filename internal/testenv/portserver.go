package testenv

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
)

// PortServerBinary builds internal/testenv/portserver (static, so it runs
// in any template) once per test process and returns its path.
func PortServerBinary(t testing.TB) string {
	t.Helper()
	return StaticBinary(t, "./internal/testenv/portserver")
}

// PortServerGuestPath is where StartPortServer puts the binary in a guest.
const PortServerGuestPath = "/tmp/portserver"

// StartPortServer uploads the port server into sandbox through c, starts it
// listening on listen (e.g. "127.0.0.1:8080" or "0.0.0.0:8080") as a
// command, and returns the command's id once the server's port is open.
// The command runs until the sandbox goes or the test signals it.
func StartPortServer(t testing.TB, c *client.Client, sandbox, listen string) string {
	t.Helper()
	bin := PortServerBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := c.PutFile(ctx, sandbox, PortServerGuestPath, 0o755, f); err != nil {
		t.Fatalf("upload portserver: %v", err)
	}
	cmd, err := c.CreateCommand(ctx, sandbox, apiv1.CreateCommandRequest{Argv: []string{PortServerGuestPath, "-listen", listen}})
	if err != nil {
		t.Fatalf("create portserver command: %v", err)
	}
	ev, err := c.Events(ctx, sandbox, cmd.ID, 0)
	if err != nil {
		t.Fatalf("start portserver: %v", err)
	}
	defer ev.Close()
	// Closing the stream when ctx ends unblocks Next.
	stop := context.AfterFunc(ctx, func() { ev.Close() })
	defer stop()
	var out strings.Builder
	for {
		e, err := ev.Next()
		if err == io.EOF || e.Type == apiv1.EventExit {
			t.Fatalf("portserver ended before listening: %s", out.String())
		}
		if err != nil {
			t.Fatalf("portserver events: %v (output so far: %q)", err, out.String())
		}
		if e.Data != nil {
			out.WriteString(*e.Data)
			if strings.Contains(out.String(), "listening ") {
				return cmd.ID
			}
		}
	}
}
