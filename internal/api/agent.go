package api

import (
	"context"
	"io"

	"github.com/space-sandbox/space/internal/agentproto"
)

// guestAgent is what the API needs of a sandbox's guest agent. The worker
// hands out an *agentclient.Client; agentOf adapts it, which keeps the
// handlers independent of that client's exact shape.
type guestAgent interface {
	Start(ctx context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error)
	// Events streams the process's events with Seq > after until the exit
	// event (then io.EOF) or until ctx ends.
	Events(ctx context.Context, id string, after uint64) (eventStream, error)
	Stdin(ctx context.Context, id string, data []byte, eof bool) error
	Signal(ctx context.Context, id, signal string) error
	Resize(ctx context.Context, id string, rows, cols uint16) error
	Get(ctx context.Context, id string) (agentproto.ProcessInfo, error)
	List(ctx context.Context) ([]agentproto.ProcessInfo, error)

	ReadFile(ctx context.Context, path string) (agentproto.FileInfo, io.ReadCloser, error)
	WriteFile(ctx context.Context, path string, mode uint32, size int64, r io.Reader) (agentproto.FileInfo, error)
	ListDir(ctx context.Context, path string) ([]agentproto.FileInfo, error)
	Stat(ctx context.Context, path string) (agentproto.FileInfo, error)
	Delete(ctx context.Context, path string, recursive bool) error
	TarOut(ctx context.Context, path string) (io.ReadCloser, error)
	TarIn(ctx context.Context, path string, r io.Reader) error
}

// eventStream yields a process's events in order.
type eventStream interface {
	// Next returns the next event; io.EOF after the exit event.
	Next() (agentproto.Event, error)
	Close() error
}
