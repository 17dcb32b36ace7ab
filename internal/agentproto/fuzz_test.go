package agentproto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"testing"
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
