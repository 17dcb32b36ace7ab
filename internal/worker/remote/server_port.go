package remote

import (
	"context"
	"errors"
	"io"
	"math"
	"net"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/workerpb"
)

func (h guestService) ListPorts(ctx context.Context, req *connect.Request[workerpb.ListPortsRequest]) (*connect.Response[workerpb.ListPortsResponse], error) {
	g, err := h.guest(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	ports, err := g.ListPorts(ctx)
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.ListPortsResponse{Ports: each(ports, portToPB)}), nil
}

// DialPort relays one connection to a port in the guest: the client's
// chunks are written to the guest's conn as they come (a guest slow to read
// stalls this stream's window, nothing else), the guest's bytes are sent
// as they come (a client slow to read stalls the guest's stream on the
// agent link). The call ends once both ways are closed; a cut on either
// side, or the server closing, closes the guest's conn.
func (h guestService) DialPort(ctx context.Context, stream *connect.BidiStream[workerpb.DialPortRequest, workerpb.DialPortResponse]) error {
	ctx, stop := h.s.streamContext(ctx)
	defer stop()
	hdr, err := dialHeader(stream)
	if err != nil {
		return err
	}
	if hdr.GetPort() > math.MaxUint16 {
		return errdefs.New(errdefs.ErrInvalidArgument, "port must be 1-65535")
	}
	g, err := h.guest(ctx, hdr.GetSandboxId())
	if err != nil {
		return err
	}
	conn, err := g.DialPort(ctx, uint16(hdr.GetPort()))
	if err != nil {
		return h.s.streamEnd(err)
	}
	defer conn.Close()
	stopClose := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopClose()
	if err := stream.Send(&workerpb.DialPortResponse{Kind: &workerpb.DialPortResponse_Opened{Opened: &workerpb.Opened{}}}); err != nil {
		return err
	}
	up := make(chan error, 1)
	go func() { up <- relayUp(stream, conn) }()
	err = sendChunks(conn, portChunkBytes, func(chunk []byte) error {
		return stream.Send(&workerpb.DialPortResponse{Kind: &workerpb.DialPortResponse_Chunk{Chunk: chunk}})
	})
	if err == nil {
		err = stream.Send(&workerpb.DialPortResponse{Kind: &workerpb.DialPortResponse_CloseWrite{CloseWrite: &workerpb.CloseWrite{}}})
	}
	if err != nil {
		// relayUp, if still in Receive, ends when the call does (Connect
		// closes the request body after this returns); in a write to the
		// guest, now.
		conn.Close()
		return h.s.streamEnd(portEnd(err))
	}
	// The guest's side is closed; the call lasts until the client's is.
	return h.s.streamEnd(portEnd(<-up))
}

// relayUp writes the client's chunks to the guest's conn until
// close_write (then half-closes it) or a cut (then closes it).
func relayUp(stream *connect.BidiStream[workerpb.DialPortRequest, workerpb.DialPortResponse], conn net.Conn) error {
	body := &chunkReader{receive: func() ([]byte, bool, error) {
		m, err := stream.Receive()
		if errors.Is(err, io.EOF) {
			return nil, false, nil // the client ended its side: as close_write
		}
		if err != nil {
			return nil, false, errUploadCut(err)
		}
		switch k := m.GetKind().(type) {
		case *workerpb.DialPortRequest_Chunk:
			return k.Chunk, true, nil
		case *workerpb.DialPortRequest_CloseWrite:
			return nil, false, nil
		default:
			return nil, false, errNotChunk
		}
	}}
	if _, err := io.Copy(conn, body); err != nil {
		conn.Close()
		return err
	}
	cw, ok := conn.(interface{ CloseWrite() error })
	if !ok {
		conn.Close()
		return errdefs.New(errdefs.ErrInternal, "the guest's port connection cannot half-close")
	}
	return cw.CloseWrite()
}

// portEnd is the error a relay ended with, as the call's: the guest's conn
// closed under a relay (because the other one ended it) is no error of its
// own.
func portEnd(err error) error {
	if err == nil || errdefs.ClassOf(err) != errdefs.ErrInternal {
		return err
	}
	return errdefs.New(errdefs.ErrUnavailable, "the port connection broke").WithCause(err)
}

// dialHeader receives a DialPort call's first message, which must be its
// header.
func dialHeader(stream *connect.BidiStream[workerpb.DialPortRequest, workerpb.DialPortResponse]) (*workerpb.DialPortHeader, error) {
	msg, err := stream.Receive()
	if errors.Is(err, io.EOF) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "dial port: no header")
	}
	if err != nil {
		return nil, errUploadCut(err)
	}
	hdr := msg.GetHeader()
	if hdr == nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "dial port: the first message must be the header")
	}
	return hdr, nil
}
