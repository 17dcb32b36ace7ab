package agentproto

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += k
	return k, err
}

// FuzzReadFrame feeds arbitrary bytes to the frame decoder as the agent and
// the host read them (requests and responses): it must not panic, must read
// exactly a frame's bytes for each frame it accepts (raw data after a frame
// stays in the stream), and never accept a frame over MaxFrameSize.
func FuzzReadFrame(f *testing.F) {
	for _, v := range []any{
		&Request{Op: OpPing},
		&Request{Op: OpStart, Args: json.RawMessage(`{"id":"cmd_1","shell":"echo hi","timeout_seconds":5}`)},
		&Response{Error: &Error{Code: "not_found", Message: "process \"x\" not found"}},
		&Response{Result: json.RawMessage(`{"id":"cmd_1","pid":42,"state":"running"}`)},
	} {
		var buf bytes.Buffer
		if err := WriteFrame(&buf, v); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cr := &countingReader{r: bytes.NewReader(data)}
		for i := 0; i < 16; i++ {
			before := cr.n
			var req Request
			var hdr [4]byte
			copy(hdr[:], data[min(before, len(data)):])
			err := ReadFrame(cr, &req)
			if err != nil {
				return
			}
			n := int(binary.BigEndian.Uint32(hdr[:]))
			if n > MaxFrameSize {
				t.Fatalf("accepted a frame of %d bytes", n)
			}
			if got := cr.n - before; got != 4+n {
				t.Fatalf("frame of %d bytes consumed %d bytes, want %d", n, got, 4+n)
			}
			// What was accepted is re-encodable and decodes the same.
			var buf bytes.Buffer
			if err := WriteFrame(&buf, &req); err != nil {
				continue // re-encoding may escape more and outgrow the bound
			}
			var again Request
			if err := ReadFrame(&buf, &again); err != nil {
				t.Fatalf("re-read of %+v: %v", req, err)
			}
			if again.Op != req.Op || !bytes.Equal(compact(again.Args), compact(req.Args)) {
				t.Fatalf("round trip %+v -> %+v", req, again)
			}
		}
	})
}

// compact is raw's JSON value in one canonical spelling: decoded (numbers
// kept exact, a repeated key's last value, as every decoder here reads it)
// and encoded again, so that two spellings of one value compare equal —
// WriteFrame escapes "&" as \u0026, as encoding/json does.
func compact(raw json.RawMessage) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// FuzzReadEvent feeds arbitrary bytes to the event decoder (both the raw
// and the JSON form of event data): no panic, no event data over
// MaxEventData, and every accepted event survives a write and a read in
// both forms unchanged.
func FuzzReadEvent(f *testing.F) {
	code := 1
	for _, raw := range []bool{true, false} {
		var buf bytes.Buffer
		w := NewEventWriter(&buf, raw)
		for _, ev := range []Event{
			{Seq: 1, Type: EventStarted, PID: 7},
			{Seq: 2, Type: EventStdout, Data: []byte("hello\n")},
			{Seq: 3, Type: EventStderr, Data: []byte{0, 0xff, '\n'}},
			{Seq: 9, Type: EventGap, LostBytes: 12},
			{Seq: 10, Type: EventExit, Exit: &ExitStatus{ExitCode: &code, Reason: ReasonExited}},
		} {
			if err := w.Write(&ev); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for i := 0; i < 16; i++ {
			var ev Event
			if err := ReadEvent(r, &ev); err != nil {
				return
			}
			if len(ev.Data) > MaxEventData {
				t.Fatalf("accepted an event with %d data bytes", len(ev.Data))
			}
			want, err := json.Marshal(&ev)
			if err != nil {
				t.Fatal(err)
			}
			for _, raw := range []bool{true, false} {
				var buf bytes.Buffer
				if err := NewEventWriter(&buf, raw).Write(&ev); err != nil {
					continue // too large for a frame once encoded this way
				}
				var again Event
				if err := ReadEvent(&buf, &again); err != nil {
					t.Fatalf("raw=%v re-read of %s: %v", raw, want, err)
				}
				if buf.Len() != 0 {
					t.Fatalf("raw=%v: %d bytes left after one event", raw, buf.Len())
				}
				got, _ := json.Marshal(&again)
				if !bytes.Equal(got, want) {
					t.Fatalf("raw=%v round trip:\n got %s\nwant %s", raw, got, want)
				}
			}
		}
	})
}

// nonceMark in a FuzzHostSync input stands for the nonce of the host's
// sync line, which the agent echoes (the fuzzer cannot guess it).
const nonceMark = "@N@"

// syncPeer is the agent's end of a link as HostSync sees it: it waits for
// the host's first sync line, then reads out the fuzz input (nonceMark
// replaced by that line's nonce) in chunks of chunk bytes, then EOF.
type syncPeer struct {
	data    []byte
	chunk   int
	mu      sync.Mutex
	written bytes.Buffer
	nonce   chan string
	once    sync.Once
	started bool   // the host's sync line came
	read    []byte // the input with the nonce in place
}

func (p *syncPeer) Read(b []byte) (int, error) {
	if !p.started {
		p.started = true
		nonce := <-p.nonce
		p.read = bytes.ReplaceAll(p.data, []byte(nonceMark), []byte(nonce))
		p.data = p.read
	}
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.data[:min(len(p.data), p.chunk)])
	p.data = p.data[n:]
	return n, nil
}

func (p *syncPeer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.written.Write(b)
	if line, _, ok := bytes.Cut(p.written.Bytes(), []byte("\n")); ok && bytes.HasPrefix(line, []byte(syncMagic)) {
		p.once.Do(func() { p.nonce <- string(line[len(syncMagic):]) })
	}
	return len(b), nil
}

func (p *syncPeer) Close() error                     { return nil }
func (p *syncPeer) LocalAddr() net.Addr              { return nil }
func (p *syncPeer) RemoteAddr() net.Addr             { return nil }
func (p *syncPeer) SetDeadline(time.Time) error      { return nil }
func (p *syncPeer) SetReadDeadline(time.Time) error  { return nil }
func (p *syncPeer) SetWriteDeadline(time.Time) error { return nil }

// FuzzHostSync feeds arbitrary bytes to the host side of the sync
// handshake as the agent's answers (the agent may be anything): no panic,
// success only on the ack of the host's own nonce, and the link then
// starts exactly after the first such ack, with nothing lost or replayed.
func FuzzHostSync(f *testing.F) {
	ack := ackMagic + nonceMark + "\n"
	for _, s := range []string{
		ack,
		ack + "\x00\x00\x00\x01yamux",
		"junk " + ackMagic + "1234\n" + ack + "rest",
		ackMagic + strings.Repeat("a", nonceLen) + "\n",
		"SPACE-ACK-1 " + nonceMark,
		strings.Repeat("SPACE-ACK-1 ", 50) + ack,
		"",
	} {
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(200))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		p := &syncPeer{data: data, chunk: int(chunk) + 1, nonce: make(chan string, 1)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := HostSync(ctx, p)
		if !p.started { // HostSync never read (it cannot fail before)
			t.Fatalf("HostSync returned without reading: %v", err)
		}
		p.mu.Lock()
		nonce := string(bytes.TrimPrefix(bytes.SplitN(p.written.Bytes(), []byte("\n"), 2)[0], []byte(syncMagic)))
		written := p.written.String()
		p.mu.Unlock()
		want := []byte(ackMagic + nonce + "\n")
		i := bytes.Index(p.read, want)
		if err != nil {
			if i >= 0 {
				t.Fatalf("failed on an input with the ack: %v", err)
			}
			return
		}
		if i < 0 {
			t.Fatal("synced without the ack of its nonce")
		}
		if !strings.HasSuffix(written, goMagic+nonce+"\n") {
			t.Fatalf("no GO line after the ack: %q", written)
		}
		rest, _ := io.ReadAll(conn)
		if !bytes.Equal(rest, p.read[i+len(want):]) {
			t.Fatalf("link starts with %q, want %q", rest, p.read[i+len(want):])
		}
	})
}

// FuzzDecodeResponse feeds arbitrary bytes to the host's reading of an
// agent's answer: a frame decoded as a Response, then decoded into each
// typed result the host asks for. No panic; an agent's error is an errdefs
// error of a class (never nil, never a success); a result that decodes
// encodes and decodes again to the same value.
func FuzzDecodeResponse(f *testing.F) {
	for _, v := range []any{
		&Response{Result: json.RawMessage(`{"version":1,"agent_version":"v1","kernel":"6.1","booted_at":"2026-01-02T03:04:05Z","configured":true,"sandbox_id":"sb_1"}`)},
		&Response{Result: json.RawMessage(`{"id":"cmd_1","pid":42,"state":"exited","started_at":"2026-01-02T03:04:05Z","exit":{"exit_code":0,"reason":"exited","ended_at":"2026-01-02T03:04:06Z"},"last_seq":9}`)},
		&Response{Result: json.RawMessage(`{"processes":[{"id":"a","pid":1,"state":"running"},{"id":"a","pid":1,"state":"running"}]}`)},
		&Response{Result: json.RawMessage(`{"name":"f","type":"file","size":12,"mode":420,"mtime":"2026-01-02T03:04:05Z"}`)},
		&Response{Result: json.RawMessage(`{"entries":[{"name":"d","type":"dir","size":0,"mode":493}]}`)},
		&Response{Error: &Error{Code: "not_found", Message: "no such file"}},
		&Response{Error: &Error{Code: "lost", Message: "a code no class has"}},
		&Response{Error: &Error{}},
	} {
		var buf bytes.Buffer
		if err := WriteFrame(&buf, v); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var resp Response
		if err := ReadFrame(bytes.NewReader(data), &resp); err != nil {
			return
		}
		for _, out := range []any{&Info{}, &ProcessInfo{}, &ProcessList{}, &FileInfo{}, &DirList{}} {
			err := resp.Decode(out)
			if resp.Error != nil {
				if err == nil || errdefs.ClassOf(err) != errdefs.FromCode(resp.Error.Code) {
					t.Fatalf("agent error %+v decoded as %v", resp.Error, err)
				}
				continue
			}
			if err != nil {
				if !errors.Is(err, errdefs.ErrInternal) {
					t.Fatalf("bad result decoded as %v, want internal", err)
				}
				continue
			}
			b, err := json.Marshal(out)
			if err != nil {
				continue // e.g. a time outside what encoding/json writes
			}
			again := reflect.New(reflect.TypeOf(out).Elem()).Interface()
			if err := json.Unmarshal(b, again); err != nil {
				t.Fatalf("re-decode %s: %v", b, err)
			}
			if b2, _ := json.Marshal(again); !bytes.Equal(b, b2) {
				t.Fatalf("round trip %s -> %s", b, b2)
			}
		}
	})
}
