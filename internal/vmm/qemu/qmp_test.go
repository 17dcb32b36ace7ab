package qemu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// fakeQMP serves one QMP client on a unix socket: the greeting, then for
// each command the answer reply returns (raw bytes, newline included).
func fakeQMP(t *testing.T, reply func(cmd string) []byte) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "qmp.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n")); err != nil {
			return
		}
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			line := sc.Text()
			id := line[strings.Index(line, `"id":`)+len(`"id":`):]
			id = id[:strings.IndexAny(id, ",}")]
			cmd := line[strings.Index(line, `"execute":"`)+len(`"execute":"`):]
			cmd = cmd[:strings.Index(cmd, `"`)]
			out := reply(cmd)
			if out == nil {
				out = []byte(`{"return": {}, "id": ` + id + "}\n")
			}
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}()
	return path
}

// TestQMPLineTooLong: a compromised QEMU that answers with an endless line
// made spaced buffer it all (bufio.Reader.ReadBytes has no limit) while
// the command waited for its context. The reader now fails the QMP
// connection at qmpMaxLine with an error that says so.
func TestQMPLineTooLong(t *testing.T) {
	long := append([]byte(`{"return": "`), bytes.Repeat([]byte("x"), 4*qmpMaxLine)...)
	path := fakeQMP(t, func(cmd string) []byte {
		if cmd == "query-status" {
			return long // and no newline
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := dialQMP(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	err = q.Execute(ctx, "query-status", nil, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("err %v, want unavailable: a line too long", err)
	}
	if err := q.Execute(ctx, "cont", nil, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("after the long line: %v, want unavailable", err)
	}
}

// TestQMPSkipsGarbageLines: a line that is not a JSON object is skipped,
// the reply after it still reaches its command.
func TestQMPSkipsGarbageLines(t *testing.T) {
	path := fakeQMP(t, func(cmd string) []byte {
		if cmd == "query-status" {
			return []byte("not json\n[1,2]\n{\"event\": \"STOP\"}\n{\"return\": {\"status\": \"running\"}, \"id\": \"2\"}\n")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := dialQMP(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var st struct{ Status string }
	if err := q.Execute(ctx, "query-status", nil, &st); err != nil || st.Status != "running" {
		t.Fatalf("status %+v, err %v", st, err)
	}
}
