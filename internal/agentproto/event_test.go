package agentproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

func TestEventRoundTrip(t *testing.T) {
	code := 3
	evs := []Event{
		{Seq: 1, Type: EventStarted, PID: 42, Time: time.Unix(1, 0).UTC()},
		{Seq: 2, Type: EventStdout, Data: []byte("hello\n")},
		{Seq: 3, Type: EventStderr, Data: bytes.Repeat([]byte{0, 0xff, '"', '\n'}, MaxEventChunk/4)},
		{Seq: 4, Type: EventGap, LostBytes: 7},
		{Seq: 5, Type: EventExit, Exit: &ExitStatus{ExitCode: &code, Reason: ReasonExited}},
	}
	for _, raw := range []bool{true, false} {
		var buf bytes.Buffer
		w := NewEventWriter(&buf, raw)
		for i := range evs {
			if err := w.Write(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		wireLen := buf.Len()
		for i, want := range evs {
			var got Event
			if err := ReadEvent(&buf, &got); err != nil {
				t.Fatalf("raw=%v event %d: %v", raw, i, err)
			}
			if got.Seq != want.Seq || got.Type != want.Type || got.PID != want.PID || !bytes.Equal(got.Data, want.Data) ||
				got.LostBytes != want.LostBytes || !got.Time.Equal(want.Time) || (want.Exit != nil) != (got.Exit != nil) {
				t.Fatalf("raw=%v event %d: got %+v, want %+v", raw, i, got, want)
			}
		}
		if err := ReadEvent(&buf, &Event{}); err != io.EOF {
			t.Fatalf("raw=%v: after the last event: %v, want io.EOF", raw, err)
		}
		// Raw data saves the base64 third.
		if raw && wireLen > len(evs[2].Data)+1024 {
			t.Fatalf("raw stream is %d bytes for %d data bytes", wireLen, len(evs[2].Data))
		}
	}
}

// A version 1 agent sends plain Event frames; ReadEvent must read them.
func TestReadEventVersion1(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, &Event{Seq: 9, Type: EventStdout, Data: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	var ev Event
	if err := ReadEvent(&buf, &ev); err != nil || ev.Seq != 9 || string(ev.Data) != "old" {
		t.Fatalf("got %+v, %v", ev, err)
	}
}

func TestReadEventRejects(t *testing.T) {
	frame := func(json string, tail []byte) *bytes.Buffer {
		var b bytes.Buffer
		_ = binary.Write(&b, binary.BigEndian, uint32(len(json)))
		b.WriteString(json)
		b.Write(tail)
		return &b
	}
	for name, tc := range map[string]struct {
		r    io.Reader
		want error
	}{
		"too large":       {frame(`{"seq":1,"type":"stdout","raw_len":2000000}`, nil), errdefs.ErrInvalidArgument},
		"negative":        {frame(`{"seq":1,"type":"stdout","raw_len":-1}`, nil), errdefs.ErrInvalidArgument},
		"data and raw":    {frame(`{"seq":1,"type":"stdout","data":"eA==","raw_len":1}`, []byte("y")), errdefs.ErrInvalidArgument},
		"truncated raw":   {frame(`{"seq":1,"type":"stdout","raw_len":5}`, []byte("ab")), io.ErrUnexpectedEOF},
		"truncated frame": {bytes.NewReader([]byte{0, 0, 0, 9, '{'}), io.ErrUnexpectedEOF},
	} {
		if err := ReadEvent(tc.r, &Event{}); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

func TestEventWriterRejectsOversizedData(t *testing.T) {
	err := NewEventWriter(io.Discard, true).Write(&Event{Type: EventStdout, Data: make([]byte, MaxEventData+1)})
	if !errors.Is(err, errdefs.ErrPayloadTooLarge) {
		t.Fatalf("got %v", err)
	}
}
