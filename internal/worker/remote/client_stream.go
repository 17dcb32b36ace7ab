package remote

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/workerpb"
)

func protocolError(what, msg string) error {
	return fmt.Errorf("worker %s: %w: %s", what, errdefs.ErrInternal, msg)
}

// upload sends header, then r's bytes in chunks, on a client stream, and
// returns the server's answer. When r fails the call is cut (not ended),
// so the guest discards what it got, and r's error is returned; when the
// server answers early (an error), the upload stops and that is returned.
func upload[Req, Resp any](ctx context.Context, what string, open func(context.Context) *connect.ClientStreamForClient[Req, Resp],
	header *Req, chunk func([]byte) *Req, r io.Reader) (*Resp, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := open(ctx)
	sendErr := stream.Send(header)
	var readErr error
	if sendErr == nil {
		buf := make([]byte, chunkBytes)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if sendErr = stream.Send(chunk(buf[:n])); sendErr != nil {
					break
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				readErr = err
				break
			}
		}
	}
	if readErr != nil {
		cancel() // a cut, which the server's reader sees as one
		_, _ = stream.CloseAndReceive()
		var pub *errdefs.Public
		if errors.As(readErr, &pub) {
			return nil, readErr
		}
		return nil, fmt.Errorf("worker %s: reading the upload: %w: %w", what, errdefs.ErrUnavailable, readErr)
	}
	// On a send error (io.EOF: the server answered early) the answer says
	// why; CloseAndReceive returns it.
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return nil, fromWire(ctx, what, err)
	}
	if sendErr != nil && !errors.Is(sendErr, io.EOF) {
		return nil, fromWire(ctx, what, sendErr)
	}
	return resp.Msg, nil
}

func (g *guest) WriteFile(ctx context.Context, path string, mode uint32, size int64, r io.Reader) (agentproto.FileInfo, error) {
	hdr := &workerpb.WriteFileRequest{Kind: &workerpb.WriteFileRequest_Header{Header: &workerpb.WriteFileHeader{
		SandboxId: g.sandbox, Path: path, Mode: mode, Size: max(size, 0)}}}
	resp, err := upload(ctx, "write file", g.c.guests.WriteFile, hdr, func(b []byte) *workerpb.WriteFileRequest {
		return &workerpb.WriteFileRequest{Kind: &workerpb.WriteFileRequest_Chunk{Chunk: b}}
	}, r)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	return fileFromPB(resp.GetInfo()), nil
}

func (g *guest) TarIn(ctx context.Context, path string, r io.Reader) error {
	hdr := &workerpb.TarInRequest{Kind: &workerpb.TarInRequest_Header{Header: &workerpb.TarInHeader{SandboxId: g.sandbox, Path: path}}}
	_, err := upload(ctx, "tar in", g.c.guests.TarIn, hdr, func(b []byte) *workerpb.TarInRequest {
		return &workerpb.TarInRequest{Kind: &workerpb.TarInRequest_Chunk{Chunk: b}}
	}, r)
	return err
}

// eventStream is a process's events over the protocol. When the link
// breaks (or the worker restarts) it opens the call again with after = the
// last event it delivered, so its reader sees every event once, in order,
// as the agent's own stream does across drops of the agent link.
type eventStream struct {
	g       *guest
	ctx     context.Context
	id      string
	last    uint64
	stream  *connect.ServerStreamForClient[workerpb.StreamEventsResponse]
	cancel  context.CancelFunc
	done    bool
	backoff retryBackoff
}

func (g *guest) Events(ctx context.Context, id string, after uint64) (agentproto.EventStream, error) {
	s := &eventStream{g: g, ctx: ctx, id: id, last: after}
	if err := s.attach(); err != nil {
		return nil, err
	}
	return s, nil
}

// attach opens the call and waits for Opened: an unknown process fails here.
func (s *eventStream) attach() error {
	ctx, cancel := context.WithCancel(s.ctx)
	stream, err := s.g.c.guests.StreamEvents(ctx, connect.NewRequest(&workerpb.StreamEventsRequest{
		SandboxId: s.g.sandbox, ProcessId: s.id, After: s.last}))
	if err != nil {
		cancel()
		return fromWire(s.ctx, "events", err)
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		cancel()
		if err == nil {
			return protocolError("events", "the stream ended before Opened")
		}
		return fromWire(s.ctx, "events", err)
	}
	if stream.Msg().GetOpened() == nil {
		stream.Close()
		cancel()
		return protocolError("events", "the first message is not Opened")
	}
	s.stream, s.cancel = stream, cancel
	return nil
}

// LastSeq is the sequence number of the last event Next returned.
func (s *eventStream) LastSeq() uint64 { return s.last }

// Next returns the next event; io.EOF after the exit event. A broken link
// or an unavailable worker is retried until the stream's ctx ends; any
// other error (the process was forgotten) ends the stream.
func (s *eventStream) Next() (agentproto.Event, error) {
	for {
		if s.done {
			return agentproto.Event{}, io.EOF
		}
		if s.stream == nil {
			if err := s.attach(); err != nil {
				if !linkFailure(err) || s.ctx.Err() != nil {
					return agentproto.Event{}, err
				}
				if !s.backoff.wait(s.ctx) {
					return agentproto.Event{}, fromWire(s.ctx, "events", err)
				}
				continue
			}
		}
		if s.stream.Receive() {
			ev := s.stream.Msg().GetEvent()
			if ev == nil || ev.GetSeq() <= s.last {
				continue // a repeated Opened; or delivered before a reconnect
			}
			s.backoff.reset()
			s.last = ev.GetSeq()
			out := eventFromPB(ev)
			if out.Type == agentproto.EventExit {
				s.Close()
			}
			return out, nil
		}
		err := s.stream.Err()
		s.drop()
		if err == nil {
			// The server ended the stream: nothing follows (after was at
			// or past the exit event).
			s.done = true
			return agentproto.Event{}, io.EOF
		}
		if err := fromWire(s.ctx, "events", err); !linkFailure(err) || s.ctx.Err() != nil {
			s.done = true
			return agentproto.Event{}, err
		}
	}
}

func (s *eventStream) drop() {
	if s.stream != nil {
		s.stream.Close()
		s.cancel()
		s.stream, s.cancel = nil, nil
	}
}

// Close stops the stream.
func (s *eventStream) Close() error {
	s.drop()
	s.done = true
	return nil
}
