package agentproto

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/space-sandbox/space/internal/errdefs"
)

// MaxFrameSize bounds one frame's JSON body. Bulk data (file contents, tar
// streams) never travels in frames, so this only limits control messages,
// events and stdin chunks.
const MaxFrameSize = 1 << 20

// MaxStdinChunk is the largest StdinRequest.Data a client should send in one
// request so the frame stays well under MaxFrameSize after base64.
const MaxStdinChunk = 256 << 10

// WriteFrame writes v as one frame: a 4-byte big-endian length, then JSON.
func WriteFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	if len(body) > MaxFrameSize {
		return fmt.Errorf("frame of %d bytes exceeds %d: %w", len(body), MaxFrameSize, errdefs.ErrPayloadTooLarge)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one frame into v. It reads exactly the frame's bytes and
// nothing more, so raw data following a frame stays in r. At a clean end of
// stream before any byte of a frame it returns io.EOF.
func ReadFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return fmt.Errorf("frame of %d bytes exceeds %d: %w", n, MaxFrameSize, errdefs.ErrInvalidArgument)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode frame: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ErrorFrom converts an agent-side error to its wire form, taking the code
// from the errdefs class and the message from err (which must already be
// tenant-safe).
func ErrorFrom(err error) *Error {
	return &Error{Code: errdefs.ClassOf(err).Code(), Message: err.Error()}
}

// Err turns a wire error back into a Go error of the matching errdefs class.
func (e *Error) Err() error {
	if e == nil {
		return nil
	}
	return &errdefs.Public{Class: errdefs.FromCode(e.Code), Message: e.Message}
}

// Decode is how the host reads an agent's answer: the agent's error as an
// errdefs error of the class it named (ErrInternal for a code it may not
// name), else the result decoded into out (when out is not nil and there
// is a result). A result that does not decode into out is ErrInternal.
func (r *Response) Decode(out any) error {
	if r.Error != nil {
		return r.Error.Err()
	}
	if out != nil && len(r.Result) > 0 {
		if err := json.Unmarshal(r.Result, out); err != nil {
			return fmt.Errorf("decode result: %w: %w", errdefs.ErrInternal, err)
		}
	}
	return nil
}
