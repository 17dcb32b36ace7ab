package remote

import (
	"context"
	"errors"
	"io"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb"
)

// guestService serves GuestService. Each call asks the worker for the
// sandbox's Guest afresh (the worker's Agent), so a client's guest stays
// valid across wakes and restores, as the worker's own Guest does.
type guestService struct{ s *Server }

func (h guestService) guest(ctx context.Context, sandboxID string) (worker.Guest, error) {
	return h.s.w.Agent(ctx, sandboxID)
}

func (h guestService) StartProcess(ctx context.Context, req *connect.Request[workerpb.StartProcessRequest]) (*connect.Response[workerpb.StartProcessResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	info, err := g.Start(ctx, processSpecFromPB(req.Msg.GetSpec()))
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.StartProcessResponse{Process: processToPB(info)}), nil
}

func (h guestService) StreamEvents(ctx context.Context, req *connect.Request[workerpb.StreamEventsRequest], stream *connect.ServerStream[workerpb.StreamEventsResponse]) error {
	ctx, stop := h.s.streamContext(ctx)
	defer stop()
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return err
	}
	events, err := g.Events(ctx, req.Msg.GetProcessId(), req.Msg.GetAfter())
	if err != nil {
		return h.s.streamEnd(err)
	}
	defer events.Close()
	opened := &workerpb.StreamEventsResponse{Kind: &workerpb.StreamEventsResponse_Opened{Opened: &workerpb.Opened{}}}
	if err := stream.Send(opened); err != nil {
		return err
	}
	for {
		ev, err := events.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return h.s.streamEnd(err)
		}
		msg := &workerpb.StreamEventsResponse{Kind: &workerpb.StreamEventsResponse_Event{Event: eventToPB(ev)}}
		if err := stream.Send(msg); err != nil {
			return err
		}
	}
}

func (h guestService) WriteStdin(ctx context.Context, req *connect.Request[workerpb.WriteStdinRequest]) (*connect.Response[workerpb.WriteStdinResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := g.Stdin(ctx, req.Msg.GetProcessId(), req.Msg.GetData(), req.Msg.GetEof()); err != nil {
		return nil, err
	}
	return reply(&workerpb.WriteStdinResponse{}), nil
}

func (h guestService) SignalProcess(ctx context.Context, req *connect.Request[workerpb.SignalProcessRequest]) (*connect.Response[workerpb.SignalProcessResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := g.Signal(ctx, req.Msg.GetProcessId(), req.Msg.GetSignal()); err != nil {
		return nil, err
	}
	return reply(&workerpb.SignalProcessResponse{}), nil
}

func (h guestService) ResizeProcess(ctx context.Context, req *connect.Request[workerpb.ResizeProcessRequest]) (*connect.Response[workerpb.ResizeProcessResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	rows, cols := clampU16(req.Msg.GetRows()), clampU16(req.Msg.GetCols())
	if err := g.Resize(ctx, req.Msg.GetProcessId(), rows, cols); err != nil {
		return nil, err
	}
	return reply(&workerpb.ResizeProcessResponse{}), nil
}

func (h guestService) GetProcess(ctx context.Context, req *connect.Request[workerpb.GetProcessRequest]) (*connect.Response[workerpb.GetProcessResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	info, err := g.Get(ctx, req.Msg.GetProcessId())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.GetProcessResponse{Process: processToPB(info)}), nil
}

func (h guestService) ListProcesses(ctx context.Context, req *connect.Request[workerpb.ListProcessesRequest]) (*connect.Response[workerpb.ListProcessesResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	procs, err := g.List(ctx)
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.ListProcessesResponse{Processes: each(procs, processToPB)}), nil
}

func (h guestService) ListDir(ctx context.Context, req *connect.Request[workerpb.ListDirRequest]) (*connect.Response[workerpb.ListDirResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	ents, err := g.ListDir(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.ListDirResponse{Entries: each(ents, fileToPB)}), nil
}

func (h guestService) StatFile(ctx context.Context, req *connect.Request[workerpb.StatFileRequest]) (*connect.Response[workerpb.StatFileResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	info, err := g.Stat(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.StatFileResponse{Info: fileToPB(info)}), nil
}

func (h guestService) DeleteFile(ctx context.Context, req *connect.Request[workerpb.DeleteFileRequest]) (*connect.Response[workerpb.DeleteFileResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := g.Delete(ctx, req.Msg.GetPath(), req.Msg.GetRecursive()); err != nil {
		return nil, err
	}
	return reply(&workerpb.DeleteFileResponse{}), nil
}

// sendChunks sends r's bytes with send, at most size at a time, until r
// ends.
func sendChunks(r io.Reader, size int, send func(chunk []byte) error) error {
	buf := make([]byte, size)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if serr := send(buf[:n]); serr != nil {
				return serr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// chunkReader is the bytes of a client stream after its header: the
// stream's clean end is io.EOF; a cut (the client gave up) is an error, so
// the guest discards what it got.
type chunkReader struct {
	receive func() ([]byte, bool, error) // chunk, more, error
	rest    []byte
	done    bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		if r.done {
			return 0, io.EOF
		}
		chunk, more, err := r.receive()
		if err != nil {
			return 0, err
		}
		if !more {
			r.done = true
			continue
		}
		r.rest = chunk
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// errNotChunk: a message after an upload's header that is not a chunk.
var errNotChunk = errdefs.New(errdefs.ErrInvalidArgument, "upload: expected a chunk after the header")

// errUploadCut is what the guest's upload reads when the client's stream
// broke before its end.
func errUploadCut(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return errdefs.New(errdefs.ErrCancelled, "upload ended before its end").WithCause(err)
	}
	return errdefs.New(errdefs.ErrUnavailable, "upload ended before its end").WithCause(err)
}
