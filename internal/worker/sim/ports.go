package sim

import (
	"context"
	"net"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// A simulated guest runs no servers: it lists no port, and a dial finds
// nothing listening, as a real guest with no server would answer (the port
// proxy's 502). The sandbox must still be reachable, as for every call.

func (h *guest) ListPorts(ctx context.Context) ([]agentproto.ListeningPort, error) {
	if _, _, err := h.state(); err != nil {
		return nil, err
	}
	return []agentproto.ListeningPort{}, nil
}

func (h *guest) DialPort(ctx context.Context, port uint16) (net.Conn, error) {
	if port == 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "port 0 is not a port")
	}
	if _, _, err := h.state(); err != nil {
		return nil, err
	}
	return nil, errdefs.New(errdefs.ErrFailedPrecondition, "nothing listens on port %d (a simulated guest runs no servers)", port)
}
