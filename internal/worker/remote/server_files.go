package remote

import (
	"context"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/workerpb"
)

// The streaming file calls: downloads send a first message (the FileInfo,
// or Opened) once the guest accepted the call, then chunks; uploads take a
// header, then chunks, and answer once the guest has it all.

func (h guestService) ReadFile(ctx context.Context, req *connect.Request[workerpb.ReadFileRequest], stream *connect.ServerStream[workerpb.ReadFileResponse]) error {
	ctx, stop := h.s.streamContext(ctx)
	defer stop()
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return err
	}
	rc, info, err := g.ReadFile(ctx, req.Msg.GetPath())
	if err != nil {
		return h.s.streamEnd(err)
	}
	defer rc.Close()
	if err := stream.Send(&workerpb.ReadFileResponse{Kind: &workerpb.ReadFileResponse_Info{Info: fileToPB(info)}}); err != nil {
		return err
	}
	err = sendChunks(rc, chunkBytes, func(chunk []byte) error {
		return stream.Send(&workerpb.ReadFileResponse{Kind: &workerpb.ReadFileResponse_Chunk{Chunk: chunk}})
	})
	return h.s.streamEnd(err)
}

func (h guestService) TarOut(ctx context.Context, req *connect.Request[workerpb.TarOutRequest], stream *connect.ServerStream[workerpb.TarOutResponse]) error {
	ctx, stop := h.s.streamContext(ctx)
	defer stop()
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return err
	}
	rc, err := g.TarOut(ctx, req.Msg.GetPath())
	if err != nil {
		return h.s.streamEnd(err)
	}
	defer rc.Close()
	if err := stream.Send(&workerpb.TarOutResponse{Kind: &workerpb.TarOutResponse_Opened{Opened: &workerpb.Opened{}}}); err != nil {
		return err
	}
	err = sendChunks(rc, chunkBytes, func(chunk []byte) error {
		return stream.Send(&workerpb.TarOutResponse{Kind: &workerpb.TarOutResponse_Chunk{Chunk: chunk}})
	})
	return h.s.streamEnd(err)
}

func (h guestService) WriteFile(ctx context.Context, stream *connect.ClientStream[workerpb.WriteFileRequest]) (*connect.Response[workerpb.WriteFileResponse], error) {
	ctx, stop := h.s.streamContext(ctx)
	defer stop()
	hdr, err := uploadHeader(stream, (*workerpb.WriteFileRequest).GetHeader)
	if err != nil {
		return nil, err
	}
	g, err := h.guest(ctx, hdr.GetSandboxId())
	if err != nil {
		return nil, err
	}
	body := uploadBody(stream, func(m *workerpb.WriteFileRequest) ([]byte, bool) {
		_, ok := m.GetKind().(*workerpb.WriteFileRequest_Chunk)
		return m.GetChunk(), ok
	})
	info, err := g.WriteFile(ctx, hdr.GetPath(), hdr.GetMode(), hdr.GetSize(), body)
	if err != nil {
		return nil, h.s.streamEnd(err)
	}
	return reply(&workerpb.WriteFileResponse{Info: fileToPB(info)}), nil
}

func (h guestService) TarIn(ctx context.Context, stream *connect.ClientStream[workerpb.TarInRequest]) (*connect.Response[workerpb.TarInResponse], error) {
	ctx, stop := h.s.streamContext(ctx)
	defer stop()
	hdr, err := uploadHeader(stream, (*workerpb.TarInRequest).GetHeader)
	if err != nil {
		return nil, err
	}
	g, err := h.guest(ctx, hdr.GetSandboxId())
	if err != nil {
		return nil, err
	}
	body := uploadBody(stream, func(m *workerpb.TarInRequest) ([]byte, bool) {
		_, ok := m.GetKind().(*workerpb.TarInRequest_Chunk)
		return m.GetChunk(), ok
	})
	if err := g.TarIn(ctx, hdr.GetPath(), body); err != nil {
		return nil, h.s.streamEnd(err)
	}
	return reply(&workerpb.TarInResponse{}), nil
}

// uploadHeader receives an upload's first message, which must be its
// header (header picks it out of the message).
func uploadHeader[Req, Hdr any](stream *connect.ClientStream[Req], header func(*Req) *Hdr) (*Hdr, error) {
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, errUploadCut(err)
		}
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "upload: no header")
	}
	hdr := header(stream.Msg())
	if hdr == nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "upload: the first message must be the header")
	}
	return hdr, nil
}

// uploadBody reads the chunks that follow an upload's header as one body
// (chunk picks one out of a message, false when the message is not one).
func uploadBody[Req any](stream *connect.ClientStream[Req], chunk func(*Req) ([]byte, bool)) *chunkReader {
	return &chunkReader{receive: func() ([]byte, bool, error) {
		if !stream.Receive() {
			if err := stream.Err(); err != nil {
				return nil, false, errUploadCut(err)
			}
			return nil, false, nil
		}
		c, ok := chunk(stream.Msg())
		if !ok {
			return nil, false, errNotChunk
		}
		return c, true, nil
	}}
}
