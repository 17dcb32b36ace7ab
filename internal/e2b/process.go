package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// serveProcess serves process.Process on /v1 command sessions: a process's
// pid is its command's pid, Start creates a command and streams its events,
// Connect re-attaches to a running one.
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
		cmd, err := h.findProcess(ctx, c, req.Process)
		if err != nil {
			h.rpcFail(w, r, asRPCError(err))
			return
		}
		h.streamEvents(w, r, c, cmd)
	case "List":
		if e := readUnary(r, &struct{}{}); e != nil {
			writeUnaryError(w, e)
			return
		}
		cmds, err := h.commands(ctx, c)
		if err != nil {
			writeUnaryError(w, asRPCError(err))
			return
		}
		out := listResponse{Processes: []processInfo{}}
		for _, cmd := range cmds {
			if cmd.State != apiv1.CommandRunning || cmd.PID <= 0 {
				continue
			}
			out.Processes = append(out.Processes, processInfo{Config: configOf(cmd), PID: uint32(cmd.PID)})
		}
		writeUnary(w, out)
	case "SendInput":
		var req sendInputRequest
		h.unaryOnProcess(w, r, c, &req, &req.Process, func(cmd apiv1.Command) error {
			data := req.Input.Stdin
			if data == nil {
				data = req.Input.PTY
			}
			return h.stdin(ctx, c, cmd, data, false)
		})
	case "CloseStdin":
		var req closeStdinRequest
		h.unaryOnProcess(w, r, c, &req, &req.Process, func(cmd apiv1.Command) error {
			return h.stdin(ctx, c, cmd, nil, true)
		})
	case "SendSignal":
		var req sendSignalRequest
		h.unaryOnProcess(w, r, c, &req, &req.Process, func(cmd apiv1.Command) error {
			sig := map[string]string{"SIGNAL_SIGKILL": "SIGKILL", "SIGNAL_SIGTERM": "SIGTERM"}[req.Signal]
			if sig == "" {
				return rpcErrorf("invalid_argument", "unknown signal %q", req.Signal)
			}
			_, err := h.callJSON(ctx, c.who, "POST", c.sandboxPath("/commands/"+cmd.ID+"/signal"), nil, apiv1.SignalRequest{Signal: sig}, nil)
			return err
		})
	case "Update":
		var req updateRequest
		h.unaryOnProcess(w, r, c, &req, &req.Process, func(cmd apiv1.Command) error {
			if req.PTY == nil || req.PTY.Size == nil {
				return nil
			}
			_, err := h.callJSON(ctx, c.who, "POST", c.sandboxPath("/commands/"+cmd.ID+"/resize"), nil,
				apiv1.ResizeRequest{Rows: int(req.PTY.Size.Rows), Cols: int(req.PTY.Size.Cols)}, nil)
			return err
		})
	default:
		h.rpcFail(w, r, rpcErrorf("unimplemented", "process.Process/%s is not supported by SPACE", method))
	}
}

// unaryOnProcess decodes req, finds the process sel names, runs fn on it
// and answers {} or the error.
func (h *Handler) unaryOnProcess(w http.ResponseWriter, r *http.Request, c *envdCall, req any, sel *processSelector, fn func(apiv1.Command) error) {
	if e := readUnary(r, req); e != nil {
		writeUnaryError(w, e)
		return
	}
	cmd, err := h.findProcess(r.Context(), c, *sel)
	if err == nil {
		err = fn(cmd)
	}
	if err != nil {
		writeUnaryError(w, asRPCError(err))
		return
	}
	writeUnary(w, struct{}{})
}

func (h *Handler) stdin(ctx context.Context, c *envdCall, cmd apiv1.Command, data []byte, eof bool) error {
	q := url.Values{}
	if eof {
		q.Set("eof", "true")
	}
	res := h.call(ctx, c.who, "POST", c.sandboxPath("/commands/"+cmd.ID+"/stdin"), q, bytes.NewReader(data), "application/octet-stream")
	if !res.ok() {
		return res.err()
	}
	return nil
}

func configOf(cmd apiv1.Command) processConfig {
	pc := processConfig{Envs: cmd.Env, Args: []string{}}
	if pc.Envs == nil {
		pc.Envs = map[string]string{}
	}
	if len(cmd.Argv) > 0 {
		pc.Cmd, pc.Args = cmd.Argv[0], append(pc.Args, cmd.Argv[1:]...)
	}
	if cmd.Cwd != "" {
		cwd := cmd.Cwd
		pc.Cwd = &cwd
	}
	return pc
}

// commands lists all of the sandbox's command sessions.
func (h *Handler) commands(ctx context.Context, c *envdCall) ([]apiv1.Command, error) {
	var all []apiv1.Command
	q := url.Values{"page_size": {"1000"}}
	for {
		var page apiv1.CommandList
		if _, err := h.callJSON(ctx, c.who, "GET", c.sandboxPath("/commands"), q, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Commands...)
		if page.NextPageToken == "" {
			return all, nil
		}
		q.Set("page_token", page.NextPageToken)
	}
}

// findProcess finds the running command a selector names. Tags are not
// kept, so only pids select.
func (h *Handler) findProcess(ctx context.Context, c *envdCall, sel processSelector) (apiv1.Command, error) {
	if sel.PID == nil {
		return apiv1.Command{}, rpcErrorf("invalid_argument", "select the process by pid (tags are not supported)")
	}
	cmds, err := h.commands(ctx, c)
	if err != nil {
		return apiv1.Command{}, err
	}
	for _, cmd := range cmds {
		if cmd.PID == int(*sel.PID) && cmd.State == apiv1.CommandRunning {
			return cmd, nil
		}
	}
	return apiv1.Command{}, rpcErrorf("not_found", "process with pid %d not found", *sel.PID)
}

func (h *Handler) startProcess(w http.ResponseWriter, r *http.Request, c *envdCall, req startRequest) {
	if req.Process.Cmd == "" {
		h.rpcFail(w, r, rpcErrorf("invalid_argument", "process.cmd is required"))
		return
	}
	in := apiv1.CreateCommandRequest{
		Argv: append([]string{req.Process.Cmd}, req.Process.Args...),
		Env:  req.Process.Envs, User: c.user,
	}
	// envd starts processes in the user's home unless told otherwise.
	in.Cwd = c.resolve("")
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		in.Cwd = c.resolve(*req.Process.Cwd)
	}
	if req.Stdin != nil {
		in.Stdin = *req.Stdin
	}
	if req.PTY != nil {
		in.PTY = &apiv1.PTY{Rows: 24, Cols: 80}
		if req.PTY.Size != nil {
			in.PTY.Rows, in.PTY.Cols = int(req.PTY.Size.Rows), int(req.PTY.Size.Cols)
		}
		in.Stdin = true
	}
	var out apiv1.CommandResponse
	if _, err := h.callJSON(r.Context(), c.who, "POST", c.sandboxPath("/commands"), nil, in, &out); err != nil {
		h.rpcFail(w, r, asRPCError(err))
		return
	}
	h.streamEvents(w, r, c, out.Command)
}

// streamEvents attaches to a command's /v1 event stream (which starts a
// created command) and forwards it as process events until the exit.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request, c *envdCall, cmd apiv1.Command) {
	status, hdr, body := h.stream(r.Context(), c.who, "GET", c.sandboxPath("/commands/"+cmd.ID+"/events"), nil)
	defer body.Close()
	if status != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(body, 1<<20))
		h.rpcFail(w, r, asRPCError((&v1Response{status: status, header: hdr, body: b}).err()))
		return
	}
	out := newServerStream(w)
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var ev apiv1.Event
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				out.End(rpcErrorf("internal", "bad event from the command stream"))
				return
			}
			done, e := forward(out, ev, cmd.PTY != nil)
			if e != nil || done {
				out.End(e)
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) || r.Context().Err() != nil {
				out.End(rpcErrorf("unavailable", "the command's event stream ended before its exit"))
				return
			}
			out.End(rpcErrorf("unavailable", "the command's event stream broke"))
			return
		}
	}
}

// forward sends one /v1 event as a process event; done is true after the
// exit.
func forward(out *serverStream, ev apiv1.Event, pty bool) (done bool, e *rpcError) {
	var pe processEvent
	switch ev.Type {
	case apiv1.EventStarted:
		pe.Start = &startEvent{PID: uint32(ev.PID)}
	case apiv1.EventStdout:
		if pty {
			pe.Data = &dataEvent{PTY: ev.Bytes()}
		} else {
			pe.Data = &dataEvent{Stdout: ev.Bytes()}
		}
	case apiv1.EventStderr:
		pe.Data = &dataEvent{Stderr: ev.Bytes()}
	case apiv1.EventHeartbeat:
		pe.Keepalive = &keepAlive{}
	case apiv1.EventExit:
		pe.End = endOf(ev)
		done = true
	case apiv1.EventError:
		return true, rpcErrorf(rpcCodeOfV1(ev.Code), "%s", ev.Message)
	default: // gap: the lost bytes are gone either way
		return false, nil
	}
	if err := out.Send(eventResponse{Event: pe}); err != nil {
		return true, nil // the client left
	}
	return done, nil
}

// endOf is E2B's end event of a /v1 exit: a signaled process has exit
// code -1, and status reads like Go's ProcessState.
func endOf(ev apiv1.Event) *endEvent {
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

func rpcCodeOfV1(code string) string { return rpcCodeOf(statusOfCode(code)) }
