package e2b

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/sandbox"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, msg := range [][]byte{{}, []byte(`{"a":1}`), bytes.Repeat([]byte("x"), 70000)} {
		b := envelope(flagEndStream, msg)
		if len(b) != 5+len(msg) {
			t.Fatalf("frame of %d bytes for %d", len(b), len(msg))
		}
		flags, got, err := readEnvelope(bytes.NewReader(b))
		if err != nil || flags != flagEndStream || !bytes.Equal(got, msg) {
			t.Fatalf("round trip: flags %x err %v", flags, err)
		}
	}
	// A frame announcing more than maxMessage is refused before reading it.
	big := []byte{0, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := readEnvelope(bytes.NewReader(big)); err == nil {
		t.Fatal("oversized frame accepted")
	}
	// A truncated frame is an error, not a short message.
	if _, _, err := readEnvelope(bytes.NewReader(envelope(0, []byte(`{"a":1}`))[:8])); err == nil {
		t.Fatal("truncated frame accepted")
	}
}

func TestReadStreamRequest(t *testing.T) {
	for _, c := range []struct {
		name, ctype string
		body        []byte
		wantCode    string
	}{
		{"ok", "application/connect+json", envelope(0, []byte(`{"process":{"cmd":"/bin/bash","args":["-c","x"]},"stdin":false}`)), ""},
		{"unary type", "application/json", envelope(0, []byte(`{}`)), "invalid_argument"},
		{"compressed", "application/connect+json", envelope(flagCompressed, []byte(`{}`)), "internal"},
		{"not json", "application/connect+json", envelope(0, []byte(`{`)), "invalid_argument"},
		{"no frame", "application/connect+json", nil, "invalid_argument"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/process.Process/Start", bytes.NewReader(c.body))
			r.Header.Set("Content-Type", c.ctype)
			var req startRequest
			e := readStreamRequest(r, &req)
			switch {
			case c.wantCode == "" && e != nil:
				t.Fatalf("error %v", e)
			case c.wantCode != "" && (e == nil || e.Code != c.wantCode):
				t.Fatalf("error %v, want %s", e, c.wantCode)
			case c.wantCode == "" && (req.Process.Cmd != "/bin/bash" || len(req.Process.Args) != 2 || req.Stdin == nil || *req.Stdin):
				t.Fatalf("decoded %+v", req)
			}
		})
	}
}

// TestProcessStream checks the wire form of a forwarded command: start
// first, output as base64 bytes, the end event, then the end-of-stream.
func TestProcessStream(t *testing.T) {
	w := httptest.NewRecorder()
	s := &processSink{out: newServerStream(w)}
	code := 3
	for _, ev := range []agentproto.Event{
		{Type: agentproto.EventStarted, PID: 42},
		{Type: agentproto.EventStdout, Data: []byte("hi\n")},
		{Type: agentproto.EventStderr, Data: []byte{0xff}},
	} {
		if err := s.Event(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Heartbeat(); err != nil {
		t.Fatal(err)
	}
	if err := s.Event(agentproto.Event{Type: agentproto.EventExit, Seq: 9,
		Exit: &agentproto.ExitStatus{ExitCode: &code, Reason: agentproto.ReasonExited}}); err != nil {
		t.Fatal(err)
	}
	s.out.End(rpcErrorf("internal", "ignored: the stream has ended"))
	want := []string{
		`{"event":{"start":{"pid":42}}}`,
		`{"event":{"data":{"stdout":"aGkK"}}}`,
		`{"event":{"data":{"stderr":"/w=="}}}`,
		`{"event":{"keepalive":{}}}`,
		`{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}}`,
	}
	for i, wnt := range want {
		flags, msg, err := readEnvelope(w.Body)
		if err != nil || flags != 0 || string(msg) != wnt {
			t.Fatalf("frame %d = %x %s (%v), want %s", i, flags, msg, err, wnt)
		}
	}
	flags, msg, err := readEnvelope(w.Body)
	if err != nil || flags != flagEndStream || string(msg) != `{}` {
		t.Fatalf("end frame = %x %s %v", flags, msg, err)
	}
	if w.Body.Len() != 0 {
		t.Fatalf("%d bytes after the end frame", w.Body.Len())
	}
}

func TestEndOfSignaled(t *testing.T) {
	sig := "SIGKILL"
	end := endOf(sandbox.Exit{Signal: &sig, Reason: "killed"})
	b, _ := json.Marshal(end)
	if end.ExitCode != -1 || end.Exited || !strings.Contains(end.Status, "SIGKILL") || end.Error == nil {
		t.Fatalf("end = %s", b)
	}
}

func TestUnaryError(t *testing.T) {
	for code, status := range map[string]int{"not_found": 404, "already_exists": 409, "unauthenticated": 401, "unimplemented": 501, "internal": 500} {
		w := httptest.NewRecorder()
		writeUnaryError(w, rpcErrorf(code, "m"))
		var got rpcError
		if w.Code != status || json.Unmarshal(w.Body.Bytes(), &got) != nil || got.Code != code || got.Message != "m" {
			t.Errorf("%s: %d %s", code, w.Code, w.Body.String())
		}
	}
}

func TestReadStreamRequestOneMessage(t *testing.T) {
	body := append(envelope(0, []byte(`{}`)), envelope(0, []byte(`{}`))...)
	r := httptest.NewRequest("POST", "/process.Process/Start", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/connect+json")
	if e := readStreamRequest(r, &startRequest{}); e == nil || e.Code != "invalid_argument" {
		t.Fatalf("two messages: %v", e)
	}
}
