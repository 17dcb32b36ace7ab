package e2b

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// The Connect protocol, JSON codec, as the E2B SDKs speak it to envd: a
// unary call is a POST of one JSON message answered by one (or by an error
// JSON with a matching HTTP status); a server stream is a POST of one
// enveloped message answered by enveloped messages and one end-of-stream
// envelope. An envelope is a flag byte, a 4-byte big-endian length and the
// JSON. Written by hand: the services are small, and hand-written structs
// keep proto3's JSON mapping visible (see messages.go).

const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
	// maxMessage bounds one request message (file data goes over /files).
	maxMessage = 4 << 20
)

// rpcError is a Connect error: a code such as "not_found" and a message.
type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *rpcError) Error() string { return e.Code + ": " + e.Message }

func rpcErrorf(code, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// httpStatus is the status of a unary error response with code.
func (e *rpcError) httpStatus() int {
	switch e.Code {
	case "canceled":
		return 499
	case "invalid_argument", "failed_precondition", "out_of_range":
		return http.StatusBadRequest
	case "deadline_exceeded":
		return http.StatusGatewayTimeout
	case "not_found":
		return http.StatusNotFound
	case "already_exists", "aborted":
		return http.StatusConflict
	case "permission_denied":
		return http.StatusForbidden
	case "resource_exhausted":
		return http.StatusTooManyRequests
	case "unimplemented":
		return http.StatusNotImplemented
	case "unavailable":
		return http.StatusServiceUnavailable
	case "unauthenticated":
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// asRPCError turns an error (the domain's or this package's) into a Connect error.
func asRPCError(err error) *rpcError {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	if status, msg, ok := domainError(err); ok {
		return &rpcError{Code: rpcCodeOf(status), Message: msg}
	}
	var pe *publicError
	if errors.As(err, &pe) {
		return &rpcError{Code: rpcCodeOf(pe.status), Message: pe.message}
	}
	return &rpcError{Code: "internal", Message: "internal error"}
}

func rpcCodeOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_argument"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "permission_denied"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict, http.StatusPreconditionFailed:
		return "failed_precondition"
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return "resource_exhausted"
	case http.StatusNotImplemented:
		return "unimplemented"
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return "unavailable"
	case http.StatusGatewayTimeout:
		return "deadline_exceeded"
	}
	return "internal"
}

func mediaType(r *http.Request) string {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(ct))
}

// readUnary decodes a unary request (an empty body is the empty message).
func readUnary(r *http.Request, v any) *rpcError {
	if mediaType(r) != "application/json" {
		return rpcErrorf("invalid_argument", "unary calls take Content-Type application/json")
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
	if err != nil {
		return rpcErrorf("invalid_argument", "read request: %v", err)
	}
	if len(b) > maxMessage {
		return rpcErrorf("resource_exhausted", "request message exceeds %d bytes", maxMessage)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return rpcErrorf("invalid_argument", "request is not a valid message: %v", err)
	}
	return nil
}

func writeUnary(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

func writeUnaryError(w http.ResponseWriter, e *rpcError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.httpStatus())
	_ = json.NewEncoder(w).Encode(e)
}

// readEnvelope reads one enveloped message.
func readEnvelope(r io.Reader) (flags byte, msg []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return 0, nil, rpcErrorf("resource_exhausted", "message of %d bytes exceeds %d", n, maxMessage)
	}
	msg = make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, nil, err
	}
	return hdr[0], msg, nil
}

// envelope frames msg.
func envelope(flags byte, msg []byte) []byte {
	out := make([]byte, 5+len(msg))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	copy(out[5:], msg)
	return out
}

// readStreamRequest decodes the one request message of a server stream.
func readStreamRequest(r *http.Request, v any) *rpcError {
	if mediaType(r) != "application/connect+json" {
		return rpcErrorf("invalid_argument", "streaming calls take Content-Type application/connect+json")
	}
	flags, msg, err := readEnvelope(r.Body)
	if err != nil {
		var re *rpcError
		if errors.As(err, &re) {
			return re
		}
		return rpcErrorf("invalid_argument", "read request envelope: %v", err)
	}
	// Read on to the body's end: only then does net/http watch the
	// connection (cancelling the call when the client goes) and lift the
	// server's read deadline for the rest of a long stream.
	if n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, 1)); n > 0 {
		return rpcErrorf("invalid_argument", "a server stream takes exactly one request message")
	}
	if flags&flagCompressed != 0 {
		return rpcErrorf("internal", "compressed messages are not supported")
	}
	if err := json.Unmarshal(msg, v); err != nil {
		return rpcErrorf("invalid_argument", "request is not a valid message: %v", err)
	}
	return nil
}

// serverStream writes a server stream's messages; safe for concurrent Send.
type serverStream struct {
	mu    sync.Mutex
	w     http.ResponseWriter
	rc    *http.ResponseController
	ended bool
}

func newServerStream(w http.ResponseWriter) *serverStream {
	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	s := &serverStream{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

// Send writes one message and flushes it.
func (s *serverStream) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return errors.New("stream ended")
	}
	if _, err := s.w.Write(envelope(0, b)); err != nil {
		return err
	}
	return s.rc.Flush()
}

// End writes the end-of-stream message: {} or {"error": e}. Later calls do
// nothing.
func (s *serverStream) End(e *rpcError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	end := map[string]any{}
	if e != nil {
		end["error"] = e
	}
	b, _ := json.Marshal(end)
	_, _ = s.w.Write(envelope(flagEndStream, b))
	_ = s.rc.Flush()
}
