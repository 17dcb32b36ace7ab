package remote_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb/workerpbconnect"
)

// A command's event stream outlives a restart of the server mid-stream:
// output made while no server runs is replayed (the client resumes with
// after = the last seq it delivered), nothing is lost or repeated.
func TestEventsSurviveServerRestart(t *testing.T) {
	fw := apitest.NewWorker(t)
	tok := newToken(t)
	s := serve(t, fw, tok)
	var attaches atomic.Int32
	s.wrap = func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == workerpbconnect.GuestServiceStreamEventsProcedure {
				attaches.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	}
	ctx := timeout(t, 2*time.Minute)
	c := s.client(t, tok)
	if _, err := c.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_restart", Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	g, err := c.Agent(ctx, "sbx_restart")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Start(ctx, agentproto.ProcessSpec{ID: "cat", Argv: []string{"cat"}, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	events, err := g.Events(ctx, "cat", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	// The worker's own guest, to make output while no server runs.
	direct, err := fw.Agent(ctx, "sbx_restart")
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		out  string
		seqs []uint64
		exit *agentproto.ExitStatus
		err  error
	}
	got := make(chan string, 100)
	done := make(chan result, 1)
	go func() {
		var r result
		for {
			ev, err := events.Next()
			if err != nil {
				if err != io.EOF {
					r.err = err
				}
				done <- r
				return
			}
			r.seqs = append(r.seqs, ev.Seq)
			switch ev.Type {
			case agentproto.EventStdout:
				r.out += string(ev.Data)
				got <- string(ev.Data)
			case agentproto.EventExit:
				r.exit = ev.Exit
			case agentproto.EventGap:
				r.err = fmt.Errorf("gap event %+v", ev)
			}
		}
	}()
	var want strings.Builder
	say := func(line string) {
		t.Helper()
		want.WriteString(line)
		if err := direct.Stdin(ctx, "cat", []byte(line), false); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(line string) {
		t.Helper()
		var seen string
		for !strings.Contains(seen, line) {
			select {
			case s := <-got:
				seen += s
			case r := <-done:
				t.Fatalf("stream ended early: %+v", r)
			case <-ctx.Done():
				t.Fatalf("no %q on the stream", line)
			}
		}
	}
	for i := range 5 {
		say(fmt.Sprintf("before %d\n", i))
		waitFor(fmt.Sprintf("before %d\n", i))
	}
	s.stop()
	for i := range 5 {
		say(fmt.Sprintf("while down %d\n", i))
	}
	// The output exists in the guest before the server comes back.
	seen, err := direct.Events(ctx, "cat", 0)
	if err != nil {
		t.Fatal(err)
	}
	for out := ""; out != want.String(); {
		ev, err := seen.Next()
		if err != nil {
			t.Fatalf("the guest's own events: %v (after %q)", err, out)
		}
		if ev.Type == agentproto.EventStdout {
			out += string(ev.Data)
		}
	}
	seen.Close()
	before := attaches.Load()
	s.start()
	for i := range 5 {
		say(fmt.Sprintf("after %d\n", i))
	}
	if err := direct.Stdin(ctx, "cat", nil, true); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the stream did not end")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.out != want.String() {
		t.Errorf("stdout through the restart:\n%q\nwant\n%q", r.out, want.String())
	}
	for i, seq := range r.seqs { // from "started" (1) to the exit, each once
		if seq != uint64(i+1) {
			t.Errorf("seqs not 1, 2, 3, …: %v", r.seqs)
			break
		}
	}
	if r.exit == nil || r.exit.ExitCode == nil || *r.exit.ExitCode != 0 {
		t.Errorf("exit %+v, want code 0", r.exit)
	}
	if attaches.Load() == before {
		t.Error("the stream was not attached again on the new server")
	}
}

// A large file crosses the wire byte-exact both ways; an upload whose
// reader fails halfway is discarded, not kept short.
func TestLargeFile(t *testing.T) {
	tok := newToken(t)
	s := serve(t, apitest.NewWorker(t), tok)
	ctx := timeout(t, 5*time.Minute)
	c := s.client(t, tok)
	if _, err := c.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_big", Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	g, err := c.Agent(ctx, "sbx_big")
	if err != nil {
		t.Fatal(err)
	}
	const size = largeFileBytes
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	fi, err := g.WriteFile(ctx, "/big/file", 0o640, size, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != size || fi.Mode != 0o640 {
		t.Errorf("written %+v", fi)
	}
	r, info, err := g.ReadFile(ctx, "/big/file")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	r.Close()
	if err != nil || n != size || info.Size != size {
		t.Fatalf("read back %d bytes (info %d): %v", n, info.Size, err)
	}
	if !bytes.Equal(h.Sum(nil), sum[:]) {
		t.Error("the file read back differs from the one written")
	}

	// Cut halfway: the reader fails after 8 MiB.
	cut := io.MultiReader(bytes.NewReader(data[:8<<20]), failingReader{})
	if _, err := g.WriteFile(ctx, "/big/cut", 0o600, size, cut); err == nil {
		t.Fatal("an upload whose reader failed succeeded")
	}
	if _, err := g.Stat(ctx, "/big/cut"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("a cut upload left a file: %v", err)
	}
	// Reading stopped early releases the stream (Close mid-file).
	r, _, err = g.ReadFile(ctx, "/big/file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, r, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close mid-file: %v", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("the sender gave up") }
