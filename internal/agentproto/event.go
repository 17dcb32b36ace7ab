package agentproto

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/space-sandbox/space/internal/errdefs"
)

// EventStream yields a process's events in order.
type EventStream interface {
	// Next returns the next event; io.EOF after the exit event.
	Next() (Event, error)
	Close() error
}

// MaxEventData bounds the output bytes of one event. The agent cuts its
// output into events of at most MaxEventChunk; a reader refuses more.
const MaxEventData = 1 << 20

// MaxEventChunk is the most output the agent puts in one event: one pipe
// read of up to this size becomes one event.
const MaxEventChunk = 256 << 10

// An event on an OpEvents stream is one frame whose JSON is the Event. When
// the client asked for raw data (EventsRequest.Raw), the agent leaves Data
// out of the JSON, sets raw_len to its length and writes the bytes raw right
// after the frame: no base64, no JSON escaping, a quarter fewer bytes on the
// link. Agents of protocol version 1 ignore EventsRequest.Raw and send Data
// inside the JSON; ReadEvent reads both forms, so a host can resume the
// streams of an older agent (a suspended sandbox made before version 2).
type eventFrame struct {
	*Event
	RawLen int `json:"raw_len,omitempty"`
}

// EventWriter writes the events of one OpEvents stream, reusing one buffer
// so each event is a single Write (one yamux data frame per window).
type EventWriter struct {
	w   io.Writer
	raw bool
	buf []byte
}

// NewEventWriter writes events to w, with their data raw after the frame
// when raw is set (the client asked for it), inside the JSON otherwise.
func NewEventWriter(w io.Writer, raw bool) *EventWriter {
	return &EventWriter{w: w, raw: raw}
}

// Write sends ev as one frame (plus its raw data).
func (ew *EventWriter) Write(ev *Event) error {
	if !ew.raw || len(ev.Data) == 0 {
		return WriteFrame(ew.w, ev)
	}
	if len(ev.Data) > MaxEventData {
		return fmt.Errorf("event of %d bytes exceeds %d: %w", len(ev.Data), MaxEventData, errdefs.ErrPayloadTooLarge)
	}
	hdr := *ev
	hdr.Data = nil
	body, err := json.Marshal(eventFrame{Event: &hdr, RawLen: len(ev.Data)})
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	n := 4 + len(body) + len(ev.Data)
	if cap(ew.buf) < n {
		ew.buf = make([]byte, n)
	}
	buf := ew.buf[:n]
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	copy(buf[4+len(body):], ev.Data)
	_, err = ew.w.Write(buf)
	return err
}

// ReadEvent reads one event written by EventWriter (raw or not) into ev.
func ReadEvent(r io.Reader, ev *Event) error {
	*ev = Event{}
	f := eventFrame{Event: ev}
	if err := ReadFrame(r, &f); err != nil {
		return err
	}
	if f.RawLen == 0 {
		return nil
	}
	if f.RawLen < 0 || f.RawLen > MaxEventData || len(ev.Data) > 0 {
		return fmt.Errorf("event with raw_len %d: %w", f.RawLen, errdefs.ErrInvalidArgument)
	}
	ev.Data = make([]byte, f.RawLen)
	if _, err := io.ReadFull(r, ev.Data); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}
