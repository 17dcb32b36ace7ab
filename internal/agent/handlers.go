package agent

import (
	"context"
	"io"
	"net"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// handler serves one request on its stream. An error it returns is sent as
// the response; operations that already answered report later failures by
// closing early.
type handler func(a *Agent, ctx context.Context, st net.Conn, req *agentproto.Request) error

// handlers is every operation the agent serves, each with its argument and
// result types fixed by the constructor that wraps it.
var handlers = map[agentproto.Op]handler{
	agentproto.OpPing:      noArgs(func(a *Agent) (agentproto.Info, error) { return a.Info(), nil }),
	agentproto.OpConfigure: call(func(a *Agent, _ context.Context, c agentproto.Configure) (none, error) { return none{}, a.Configure(c) }),
	agentproto.OpFreeze:    noArgs(func(a *Agent) (none, error) { return none{}, a.Freeze() }),
	agentproto.OpThaw:      noArgs(func(a *Agent) (none, error) { return none{}, a.Thaw() }),

	agentproto.OpStart: call(func(a *Agent, _ context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error) {
		return a.procs.start(spec)
	}),
	agentproto.OpEvents: stream((*Agent).streamEvents),
	agentproto.OpStdin: onProcess(func(ctx context.Context, p *process, r agentproto.StdinRequest) (none, error) {
		return none{}, p.writeStdin(ctx, r.Data, r.EOF)
	}),
	agentproto.OpSignal: call(func(a *Agent, _ context.Context, r agentproto.SignalRequest) (none, error) {
		sig, err := agentproto.ParseSignal(r.Signal) // before the lookup: a bad signal is invalid anywhere
		if err != nil {
			return none{}, err
		}
		p, err := a.procs.get(r.ID)
		if err != nil {
			return none{}, err
		}
		p.signal(sig)
		return none{}, nil
	}),
	agentproto.OpResize: onProcess(func(_ context.Context, p *process, r agentproto.ResizeRequest) (none, error) {
		return none{}, p.resize(r.Rows, r.Cols)
	}),
	agentproto.OpGet: onProcess(func(_ context.Context, p *process, _ agentproto.ProcessRef) (agentproto.ProcessInfo, error) {
		return p.info(), nil
	}),
	agentproto.OpList: noArgs(func(a *Agent) (agentproto.ProcessList, error) {
		return agentproto.ProcessList{Processes: a.procs.list()}, nil
	}),

	agentproto.OpReadFile: stream((*Agent).readFile),
	agentproto.OpWriteFile: stream(func(a *Agent, _ context.Context, st net.Conn, r agentproto.WriteFileRequest) error {
		info, err := a.files.write(r.Path, r.Mode, exactly(uploadReader(st), r.Size))
		if err != nil {
			return err
		}
		return reply(st, info, nil)
	}),
	agentproto.OpListDir: call(func(a *Agent, _ context.Context, r agentproto.PathRequest) (agentproto.DirList, error) {
		entries, err := a.files.list(r.Path)
		return agentproto.DirList{Entries: entries}, err
	}),
	agentproto.OpStat: call(func(a *Agent, _ context.Context, r agentproto.PathRequest) (agentproto.FileInfo, error) {
		return a.files.stat(r.Path)
	}),
	agentproto.OpDelete: call(func(a *Agent, _ context.Context, r agentproto.DeleteRequest) (none, error) {
		return none{}, a.files.remove(r.Path, r.Recursive)
	}),
	agentproto.OpTarOut: stream((*Agent).tarOut),
	agentproto.OpTarIn: stream(func(a *Agent, _ context.Context, st net.Conn, r agentproto.PathRequest) error {
		if err := a.files.tarIn(r.Path, uploadReader(st)); err != nil {
			return err
		}
		return reply(st, nil, nil)
	}),

	agentproto.OpPortList: noArgs(func(*Agent) (agentproto.PortList, error) { return listPorts() }),
	agentproto.OpPortDial: stream((*Agent).dialPort),
}

// none is the result of an operation that answers with no result.
type none struct{}

// dispatch runs one request through its handler.
func (a *Agent) dispatch(ctx context.Context, st net.Conn, req *agentproto.Request) error {
	h, ok := handlers[req.Op]
	if !ok {
		return errdefs.New(errdefs.ErrInvalidArgument, "unknown operation %q", req.Op)
	}
	return h(a, ctx, st, req)
}

// call is an operation that decodes arguments of type A and answers with
// f's result.
func call[A, R any](f func(a *Agent, ctx context.Context, args A) (R, error)) handler {
	return func(a *Agent, ctx context.Context, st net.Conn, req *agentproto.Request) error {
		var args A
		if err := decode(req, &args); err != nil {
			return err
		}
		r, err := f(a, ctx, args)
		if err != nil {
			return err
		}
		return replyWith(st, r)
	}
}

// noArgs is an operation without arguments.
func noArgs[R any](f func(a *Agent) (R, error)) handler {
	return func(a *Agent, _ context.Context, st net.Conn, _ *agentproto.Request) error {
		r, err := f(a)
		if err != nil {
			return err
		}
		return replyWith(st, r)
	}
}

// processArgs are the arguments of operations on one process.
type processArgs interface {
	agentproto.StdinRequest | agentproto.ResizeRequest | agentproto.ProcessRef
}

// onProcess is an operation on the process its arguments name.
func onProcess[A processArgs, R any](f func(ctx context.Context, p *process, args A) (R, error)) handler {
	return call(func(a *Agent, ctx context.Context, args A) (R, error) {
		p, err := a.procs.get(processID(args))
		if err != nil {
			var zero R
			return zero, err
		}
		return f(ctx, p, args)
	})
}

func processID(args any) string {
	switch r := args.(type) {
	case agentproto.StdinRequest:
		return r.ID
	case agentproto.ResizeRequest:
		return r.ID
	case agentproto.ProcessRef:
		return r.ID
	}
	return ""
}

// stream is an operation that answers on the stream itself (a response
// frame, then raw bytes or events).
func stream[A any](f func(a *Agent, ctx context.Context, st net.Conn, args A) error) handler {
	return func(a *Agent, ctx context.Context, st net.Conn, req *agentproto.Request) error {
		var args A
		if err := decode(req, &args); err != nil {
			return err
		}
		return f(a, ctx, st, args)
	}
}

func replyWith[R any](st net.Conn, r R) error {
	if _, empty := any(r).(none); empty {
		return reply(st, nil, nil)
	}
	return reply(st, r, nil)
}

func (a *Agent) readFile(_ context.Context, st net.Conn, r agentproto.PathRequest) error {
	f, info, err := a.files.open(r.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := reply(st, info, nil); err != nil {
		return nil
	}
	_, _ = io.Copy(st, f)
	return nil
}

func (a *Agent) tarOut(_ context.Context, st net.Conn, r agentproto.PathRequest) error {
	answered := false
	err := a.files.tarOut(r.Path, st, func() error { answered = true; return reply(st, nil, nil) })
	if err != nil && !answered {
		return err
	}
	if err != nil {
		a.log.Warn("tar out", "path", r.Path, "err", err)
	}
	return nil
}
