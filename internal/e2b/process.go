package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
)

// serveProcess serves process.Process on the Service's command sessions:
// a process's pid is its command's pid, Start creates a command and
// streams its events, Connect re-attaches to a running one.
func (h *Handler) serveProcess(w http.ResponseWriter, r *http.Request, c *envdCall, method string) {
	ctx := r.Context()
	switch method {
	case "Start":
		var req startRequest
		if e := readStreamRequest(r, &req); e != nil {
			h.rpcFail(w, r, e)
			return
		}
		h.startProcess(w, r, c, req)
	case "Connect":
		var req connectRequest
		if e := readStreamRequest(r, &req); e != nil {
			h.rpcFail(w, r, e)
			return
		}
		var sb *store.Sandbox
		var cmd *store.Command
		err := h.on(ctx, c, "process connect", func(s *store.Sandbox) (err error) {
			sb = s
			cmd, err = h.findProcess(ctx, sb, req.Process)
			return err
		})
		if err != nil {
			h.rpcFail(w, r, asRPCError(err))
			return
		}
		h.streamEvents(w, r, c, sb, cmd)
	case "List":
		if e := readUnary(r, &struct{}{}); e != nil {
			writeUnaryError(w, e)
			return
		}
		var cmds []*store.Command
		err := h.on(ctx, c, "process list", func(sb *store.Sandbox) (err error) {
			cmds, err = h.commands(ctx, sb)
			return err
		})
		if err != nil {
			writeUnaryError(w, asRPCError(err))
			return
		}
		out := listResponse{Processes: []processInfo{}}
		for _, cmd := range cmds {
			if cmd.State != store.CommandRunning || cmd.PID <= 0 {
				continue
			}
			out.Processes = append(out.Processes, processInfo{Config: configOf(specOf(cmd)), PID: uint32(cmd.PID)})
		}
		writeUnary(w, out)
	case "SendInput":
		var req sendInputRequest
		h.unaryOnProcess(w, r, c, "process input", &req, &req.Process, func(sb *store.Sandbox, cmd *store.Command) error {
			data := req.Input.Stdin
			if data == nil {
				data = req.Input.PTY
			}
			return h.sandboxes.Stdin(ctx, sb, cmd, bytes.NewReader(data), false)
		})
	case "CloseStdin":
		var req closeStdinRequest
		h.unaryOnProcess(w, r, c, "process close stdin", &req, &req.Process, func(sb *store.Sandbox, cmd *store.Command) error {
			return h.sandboxes.Stdin(ctx, sb, cmd, bytes.NewReader(nil), true)
		})
	case "SendSignal":
		var req sendSignalRequest
		h.unaryOnProcess(w, r, c, "process signal", &req, &req.Process, func(sb *store.Sandbox, cmd *store.Command) error {
			sig := map[string]string{"SIGNAL_SIGKILL": "SIGKILL", "SIGNAL_SIGTERM": "SIGTERM"}[req.Signal]
			if sig == "" {
				return rpcErrorf("invalid_argument", "unknown signal %q", req.Signal)
			}
			return h.sandboxes.Signal(ctx, sb, cmd, sig)
		})
	case "Update":
		var req updateRequest
		h.unaryOnProcess(w, r, c, "process update", &req, &req.Process, func(sb *store.Sandbox, cmd *store.Command) error {
			if req.PTY == nil || req.PTY.Size == nil {
				return nil
			}
			return h.sandboxes.Resize(ctx, sb, cmd, int(req.PTY.Size.Rows), int(req.PTY.Size.Cols))
		})
	default:
		h.rpcFail(w, r, rpcErrorf("unimplemented", "process.Process/%s is not supported by SPACE", method))
	}
}

// unaryOnProcess decodes req, finds the process sel names, runs fn on it
// and answers {} or the error.
func (h *Handler) unaryOnProcess(w http.ResponseWriter, r *http.Request, c *envdCall, what string, req any, sel *processSelector,
	fn func(*store.Sandbox, *store.Command) error) {
	if e := readUnary(r, req); e != nil {
		writeUnaryError(w, e)
		return
	}
	err := h.on(r.Context(), c, what, func(sb *store.Sandbox) error {
		cmd, err := h.findProcess(r.Context(), sb, *sel)
		if err != nil {
			return err
		}
		return fn(sb, cmd)
	})
	if err != nil {
		writeUnaryError(w, asRPCError(err))
		return
	}
	writeUnary(w, struct{}{})
}

// specOf is what a command was created to run.
func specOf(cmd *store.Command) agentproto.ProcessSpec {
	var spec agentproto.ProcessSpec
	_ = json.Unmarshal(cmd.Spec, &spec) // written by the Service
	return spec
}

func configOf(spec agentproto.ProcessSpec) processConfig {
	pc := processConfig{Envs: spec.Env, Args: []string{}}
	if pc.Envs == nil {
		pc.Envs = map[string]string{}
	}
	if len(spec.Argv) > 0 {
		pc.Cmd, pc.Args = spec.Argv[0], append(pc.Args, spec.Argv[1:]...)
	}
	if spec.Cwd != "" {
		cwd := spec.Cwd
		pc.Cwd = &cwd
	}
	return pc
}

// commands lists all of the sandbox's command sessions, fresh.
func (h *Handler) commands(ctx context.Context, sb *store.Sandbox) ([]*store.Command, error) {
	var all []*store.Command
	pr := store.PageRequest{PageSize: store.MaxPageSize}
	for {
		page, err := h.sandboxes.CommandPage(ctx, sb, pr)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextPageToken == "" {
			return all, nil
		}
		pr.PageToken = page.NextPageToken
	}
}

// findProcess finds the running command a selector names. Tags are not
// kept, so only pids select.
func (h *Handler) findProcess(ctx context.Context, sb *store.Sandbox, sel processSelector) (*store.Command, error) {
	if sel.PID == nil {
		return nil, rpcErrorf("invalid_argument", "select the process by pid (tags are not supported)")
	}
	cmds, err := h.commands(ctx, sb)
	if err != nil {
		return nil, err
	}
	for _, cmd := range cmds {
		if cmd.PID == int(*sel.PID) && cmd.State == store.CommandRunning {
			return cmd, nil
		}
	}
	return nil, rpcErrorf("not_found", "process with pid %d not found", *sel.PID)
}

func (h *Handler) startProcess(w http.ResponseWriter, r *http.Request, c *envdCall, req startRequest) {
	if req.Process.Cmd == "" {
		h.rpcFail(w, r, rpcErrorf("invalid_argument", "process.cmd is required"))
		return
	}
	spec := agentproto.ProcessSpec{
		Argv: append([]string{req.Process.Cmd}, req.Process.Args...),
		Env:  req.Process.Envs, User: c.user,
	}
	// envd starts processes in the user's home unless told otherwise.
	spec.Cwd = c.resolve("")
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		spec.Cwd = c.resolve(*req.Process.Cwd)
	}
	if req.Stdin != nil {
		spec.Stdin = *req.Stdin
	}
	if req.PTY != nil {
		spec.PTY = sandbox.PTYOf(24, 80)
		if req.PTY.Size != nil {
			spec.PTY = sandbox.PTYOf(int(req.PTY.Size.Rows), int(req.PTY.Size.Cols))
		}
		spec.Stdin = true
	}
	var sb *store.Sandbox
	var cmd *store.Command
	err := h.on(r.Context(), c, "process start", func(s *store.Sandbox) (err error) {
		sb = s
		cmd, err = h.sandboxes.NewCommand(r.Context(), sb, spec)
		return err
	})
	if err != nil {
		h.rpcFail(w, r, asRPCError(err))
		return
	}
	h.streamEvents(w, r, c, sb, cmd)
}

// streamEvents follows a command (which starts a created one) and
// forwards its events as process events until the exit.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request, c *envdCall, sb *store.Sandbox, cmd *store.Command) {
	sink := &processSink{pty: specOf(cmd).PTY != nil}
	err := h.sandboxes.FollowCommand(r.Context(), sb, cmd, 0, h.cfg.Heartbeat, func() sandbox.EventSink {
		sink.out = newServerStream(w)
		return sink
	})
	if err != nil {
		h.rpcFail(w, r, asRPCError(err))
		return
	}
	if sink.out != nil {
		sink.out.End(rpcErrorf("unavailable", "the command's event stream ended before its exit")) // no-op after the end
	}
}

// processSink writes a followed command's events as process events.
type processSink struct {
	out *serverStream
	pty bool
}

func (p *processSink) send(pe processEvent) error { return p.out.Send(eventResponse{Event: pe}) }

func (p *processSink) Event(ev agentproto.Event) error {
	var pe processEvent
	switch ev.Type {
	case agentproto.EventStarted:
		pe.Start = &startEvent{PID: uint32(ev.PID)}
	case agentproto.EventStdout:
		if p.pty {
			pe.Data = &dataEvent{PTY: ev.Data}
		} else {
			pe.Data = &dataEvent{Stdout: ev.Data}
		}
	case agentproto.EventStderr:
		pe.Data = &dataEvent{Stderr: ev.Data}
	case agentproto.EventExit:
		if ev.Exit == nil {
			return nil // the Service records it as lost and sends that
		}
		return p.Exit(sandbox.ExitOf(ev.Exit, ev.Seq))
	default: // gap: the lost bytes are gone either way
		return nil
	}
	return p.send(pe)
}

func (p *processSink) Exit(ex sandbox.Exit) error {
	err := p.send(processEvent{End: endOf(ex)})
	p.out.End(nil)
	return err
}

func (p *processSink) Heartbeat() error { return p.send(processEvent{Keepalive: &keepAlive{}}) }

func (p *processSink) Broken(err error) {
	e := asRPCError(err)
	if e.Code == "internal" {
		e = rpcErrorf("internal", "the event stream was interrupted")
	}
	p.out.End(e)
}

// endOf is E2B's end event of an exit: a signaled process has exit code
// -1, and status reads like Go's ProcessState.
func endOf(ev sandbox.Exit) *endEvent {
	end := &endEvent{ExitCode: -1}
	switch {
	case ev.ExitCode != nil:
		end.ExitCode, end.Exited = int32(*ev.ExitCode), true
		end.Status = "exit status " + strconv.Itoa(*ev.ExitCode)
	case ev.Signal != nil:
		end.Status = "signal: " + *ev.Signal
	default:
		end.Status = ev.Reason
	}
	if ev.Reason != "" && ev.Reason != "exited" && ev.Reason != "signaled" {
		end.Status = fmt.Sprintf("%s (%s)", end.Status, ev.Reason)
	}
	if end.ExitCode != 0 {
		msg := end.Status
		end.Error = &msg
	}
	return end
}
