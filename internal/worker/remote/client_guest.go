package remote

import (
	"context"
	"io"
	"net"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb"
)

// guest is one sandbox's worker.Guest over the protocol. It holds nothing
// but the sandbox's id: the server finds the guest at each call, so this
// one stays valid across link drops, pauses, wakes and restores, and fails
// (not_found) once the sandbox is deleted.
type guest struct {
	c       *Client
	sandbox string
}

var _ worker.Guest = (*guest)(nil)

// maxStdinChunk bounds the data of one stdin call, well under
// MaxMessageBytes; more is sent in order in several.
const maxStdinChunk = 4 << 20

func (g *guest) Start(ctx context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error) {
	resp, err := call(ctx, "start process", false, g.c.guests.StartProcess,
		&workerpb.StartProcessRequest{SandboxId: g.sandbox, Spec: processSpecToPB(spec)})
	if err != nil {
		return agentproto.ProcessInfo{}, err
	}
	return processFromPB(resp.GetProcess()), nil
}

func (g *guest) Stdin(ctx context.Context, id string, data []byte, eof bool) error {
	for {
		chunk := data[:min(len(data), maxStdinChunk)]
		data = data[len(chunk):]
		last := len(data) == 0
		_, err := call(ctx, "stdin", false, g.c.guests.WriteStdin,
			&workerpb.WriteStdinRequest{SandboxId: g.sandbox, ProcessId: id, Data: chunk, Eof: eof && last})
		if err != nil || last {
			return err
		}
	}
}

func (g *guest) Signal(ctx context.Context, id, signal string) error {
	_, err := call(ctx, "signal", false, g.c.guests.SignalProcess,
		&workerpb.SignalProcessRequest{SandboxId: g.sandbox, ProcessId: id, Signal: signal})
	return err
}

func (g *guest) Resize(ctx context.Context, id string, rows, cols uint16) error {
	_, err := call(ctx, "resize", true, g.c.guests.ResizeProcess,
		&workerpb.ResizeProcessRequest{SandboxId: g.sandbox, ProcessId: id, Rows: uint32(rows), Cols: uint32(cols)})
	return err
}

func (g *guest) Get(ctx context.Context, id string) (agentproto.ProcessInfo, error) {
	resp, err := call(ctx, "process", true, g.c.guests.GetProcess,
		&workerpb.GetProcessRequest{SandboxId: g.sandbox, ProcessId: id})
	if err != nil {
		return agentproto.ProcessInfo{}, err
	}
	return processFromPB(resp.GetProcess()), nil
}

func (g *guest) List(ctx context.Context) ([]agentproto.ProcessInfo, error) {
	resp, err := call(ctx, "processes", true, g.c.guests.ListProcesses, &workerpb.ListProcessesRequest{SandboxId: g.sandbox})
	if err != nil {
		return nil, err
	}
	return each(resp.GetProcesses(), processFromPB), nil
}

func (g *guest) ListDir(ctx context.Context, path string) ([]agentproto.FileInfo, error) {
	resp, err := call(ctx, "list dir", true, g.c.guests.ListDir, &workerpb.ListDirRequest{SandboxId: g.sandbox, Path: path})
	if err != nil {
		return nil, err
	}
	return each(resp.GetEntries(), fileFromPB), nil
}

func (g *guest) Stat(ctx context.Context, path string) (agentproto.FileInfo, error) {
	resp, err := call(ctx, "stat", true, g.c.guests.StatFile, &workerpb.StatFileRequest{SandboxId: g.sandbox, Path: path})
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	return fileFromPB(resp.GetInfo()), nil
}

func (g *guest) Delete(ctx context.Context, path string, recursive bool) error {
	_, err := call(ctx, "delete", false, g.c.guests.DeleteFile,
		&workerpb.DeleteFileRequest{SandboxId: g.sandbox, Path: path, Recursive: recursive})
	return err
}

// download is the bytes of a ReadFile or TarOut stream after its first
// message; Close cancels the call.
type download[T any] struct {
	ctx    context.Context
	cancel context.CancelFunc
	stream *connect.ServerStreamForClient[T]
	chunk  func(*T) ([]byte, bool)
	what   string
	rest   []byte
	err    error
}

func (d *download[T]) Read(p []byte) (int, error) {
	for len(d.rest) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		if !d.stream.Receive() {
			if err := d.stream.Err(); err != nil {
				d.err = fromWire(d.ctx, d.what, err)
			} else {
				d.err = io.EOF
			}
			continue
		}
		chunk, ok := d.chunk(d.stream.Msg())
		if !ok {
			d.err = protocolError(d.what, "a message that is not a chunk")
			continue
		}
		d.rest = chunk
	}
	n := copy(p, d.rest)
	d.rest = d.rest[n:]
	return n, nil
}

func (d *download[T]) Close() error {
	d.cancel()
	return d.stream.Close()
}

// openDownload starts a server stream and reads its first message, which
// says the guest accepted the call (or the error says why not).
func openDownload[T any](ctx context.Context, what string, start func(context.Context) (*connect.ServerStreamForClient[T], error),
	chunk func(*T) ([]byte, bool)) (*download[T], *T, error) {
	callCtx, cancel := context.WithCancel(ctx)
	stream, err := start(callCtx)
	if err != nil {
		cancel()
		return nil, nil, fromWire(ctx, what, err)
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		cancel()
		if err == nil {
			return nil, nil, protocolError(what, "the stream ended before its first message")
		}
		return nil, nil, fromWire(ctx, what, err)
	}
	return &download[T]{ctx: ctx, cancel: cancel, stream: stream, chunk: chunk, what: what}, stream.Msg(), nil
}

func (g *guest) ReadFile(ctx context.Context, path string) (io.ReadCloser, agentproto.FileInfo, error) {
	d, first, err := openDownload(ctx, "read file", func(ctx context.Context) (*connect.ServerStreamForClient[workerpb.ReadFileResponse], error) {
		return g.c.guests.ReadFile(ctx, connect.NewRequest(&workerpb.ReadFileRequest{SandboxId: g.sandbox, Path: path}))
	}, func(m *workerpb.ReadFileResponse) ([]byte, bool) {
		c, ok := m.GetKind().(*workerpb.ReadFileResponse_Chunk)
		if !ok {
			return nil, false
		}
		return c.Chunk, true
	})
	if err != nil {
		return nil, agentproto.FileInfo{}, err
	}
	if first.GetInfo() == nil {
		d.Close()
		return nil, agentproto.FileInfo{}, protocolError("read file", "the first message is not the file's info")
	}
	return d, fileFromPB(first.GetInfo()), nil
}

func (g *guest) TarOut(ctx context.Context, path string) (io.ReadCloser, error) {
	d, first, err := openDownload(ctx, "tar out", func(ctx context.Context) (*connect.ServerStreamForClient[workerpb.TarOutResponse], error) {
		return g.c.guests.TarOut(ctx, connect.NewRequest(&workerpb.TarOutRequest{SandboxId: g.sandbox, Path: path}))
	}, func(m *workerpb.TarOutResponse) ([]byte, bool) {
		c, ok := m.GetKind().(*workerpb.TarOutResponse_Chunk)
		if !ok {
			return nil, false
		}
		return c.Chunk, true
	})
	if err != nil {
		return nil, err
	}
	if first.GetOpened() == nil {
		d.Close()
		return nil, protocolError("tar out", "the first message is not Opened")
	}
	return d, nil
}

// ListPorts is not yet forwarded over the worker protocol.
// TODO(tunnelremote): placeholder until the protocol carries the port calls.
func (g *guest) ListPorts(context.Context) ([]agentproto.ListeningPort, error) {
	return nil, errdefs.New(errdefs.ErrUnavailable, "listing a sandbox's ports is not yet forwarded over the worker protocol")
}

// DialPort is not yet forwarded over the worker protocol.
// TODO(tunnelremote): placeholder until the protocol carries the port calls.
func (g *guest) DialPort(context.Context, uint16) (net.Conn, error) {
	return nil, errdefs.New(errdefs.ErrUnavailable, "dialling a sandbox's port is not yet forwarded over the worker protocol")
}
