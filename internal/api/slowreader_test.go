package api

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// TestSlowReaderBlocksNothing: a client that attaches to a chatty command's
// event stream and never reads blocks neither that command (it runs to its
// exit; the agent's buffer evicts), nor other commands of the sandbox, nor
// other streams.
func TestSlowReaderBlocksNothing(t *testing.T) {
	e := newEnv(t, Config{})
	// Bounded, so a regression fails instead of hanging the suite.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sb := e.running(e.bob, nil)
	chatty, err := e.bob.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{
		Shell: "head -c 33554432 /dev/zero | od -v | head -c 33554432"})
	if err != nil {
		t.Fatal(err)
	}

	// Attach and never read: the server's writes fill the socket buffers.
	u, _ := url.Parse(e.http.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/sandboxes/%s/commands/%s/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
		sb.ID, chatty.ID, e.bobKey)
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, "200") {
		t.Fatalf("attach: %q %v", status, err)
	}

	// The command runs to its end although nobody reads its output.
	e.waitFor(func() bool {
		c, err := e.bob.GetCommand(ctx, sb.ID, chatty.ID)
		return err == nil && c.State == "exited"
	})
	// Other commands and their streams go on.
	res, err := e.bob.Exec(ctx, sb.ID, apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{Argv: []string{"echo", "alive"}}})
	if err != nil || res.Stdout != "alive\n" {
		t.Fatalf("exec beside a stalled stream: %+v %v", res, err)
	}
	// A fresh reader of the chatty command gets the tail and its exit, with
	// a gap for what the bounded buffer dropped.
	status2, _, body := e.do("GET", "/v1/sandboxes/"+sb.ID+"/commands/"+chatty.ID+"/events", e.bobKey, nil)
	if status2 != 200 || !strings.Contains(string(body), `"type":"gap"`) || !strings.Contains(string(body), `"type":"exit"`) {
		t.Fatalf("second reader: %d, %d bytes, gap/exit missing", status2, len(body))
	}
}
