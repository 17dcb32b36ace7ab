package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

func processSpec(req *apiv1.CreateCommandRequest) agentproto.ProcessSpec {
	spec := agentproto.ProcessSpec{Argv: req.Argv, Shell: req.Shell, Cwd: req.Cwd, Env: req.Env,
		User: req.User, Stdin: req.Stdin, TimeoutSeconds: req.TimeoutSeconds}
	if req.PTY != nil {
		spec.PTY = &agentproto.PTY{Rows: uint16(req.PTY.Rows), Cols: uint16(req.PTY.Cols)}
	}
	return spec
}

// newCommand stores a command session in state created.
func (s *Server) newCommand(ctx context.Context, sb *store.Sandbox, req *apiv1.CreateCommandRequest) (*store.Command, error) {
	return s.svc.NewCommand(ctx, sb, processSpec(req))
}

func (s *Server) createCommand(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.CreateCommandRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if err := validateCommand(&req); err != nil {
		return err
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	c, err := s.newCommand(r.Context(), sb, &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, apiv1.CommandResponse{Command: toCommand(c)})
	return nil
}

// command loads the sandbox and command named in the path.
func (s *Server) command(r *http.Request) (*store.Sandbox, *store.Command, error) {
	sb, err := s.sandbox(r)
	if err != nil {
		return nil, nil, err
	}
	cid := r.PathValue("cid")
	if !validID(cid, store.PrefixCommand) {
		return nil, nil, errdefs.New(errdefs.ErrNotFound, "command %q not found", cid)
	}
	c, err := s.svc.GetCommand(r.Context(), sb.TenantID, sb.ID, cid)
	if err != nil {
		return nil, nil, notFoundAs(err, "command", cid)
	}
	return sb, c, nil
}

func (s *Server) getCommand(w http.ResponseWriter, r *http.Request) error {
	sb, c, err := s.command(r)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(r.Context(), sandbox.RefreshBudget) // a wedged guest must not hang a read
	defer cancel()
	writeJSON(w, http.StatusOK, apiv1.CommandResponse{Command: toCommand(s.svc.Refresh(rctx, sb, c))})
	return nil
}

func (s *Server) listCommands(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	pr, err := pageRequest(r)
	if err != nil {
		return err
	}
	page, err := s.svc.ListCommands(r.Context(), sb.TenantID, sb.ID, pr)
	if err != nil {
		return err
	}
	out := apiv1.CommandList{Commands: []apiv1.Command{}, NextPageToken: page.NextPageToken}
	rctx, cancel := context.WithTimeout(r.Context(), sandbox.RefreshBudget) // one budget for all the refreshes
	defer cancel()
	for _, c := range page.Items {
		out.Commands = append(out.Commands, toCommand(s.svc.Refresh(rctx, sb, c)))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// runningCommand loads a command that must be running in a running sandbox;
// a created one is started first when start is set.
func (s *Server) runningCommand(r *http.Request, start bool) (*store.Command, worker.Guest, error) {
	sb, c, err := s.command(r)
	if err != nil {
		return nil, nil, err
	}
	if err := sandbox.RequireState(sb, store.SandboxRunning); err != nil {
		return nil, nil, err
	}
	s.svc.Touch(r.Context(), sb.ID)
	if c.State == store.CommandCreated && start {
		return s.svc.EnsureStarted(r.Context(), sb, c)
	}
	if c.State != store.CommandRunning {
		return nil, nil, errdefs.New(errdefs.ErrConflict, "command %s is %s", c.ID, c.State).
			WithDetails(map[string]any{"state": string(c.State)})
	}
	ag, err := s.svc.Agent(r.Context(), sb.ID)
	return c, sandbox.Bounded(ag), err
}

func (s *Server) commandStdin(w http.ResponseWriter, r *http.Request) error {
	eof := r.URL.Query().Get("eof")
	if eof != "" && eof != "true" && eof != "false" {
		return invalid(map[string]string{"eof": "must be true or false"})
	}
	c, ag, err := s.runningCommand(r, true)
	if err != nil {
		return err
	}
	var spec agentproto.ProcessSpec
	_ = json.Unmarshal(c.Spec, &spec)
	if !spec.Stdin && spec.PTY == nil {
		return errdefs.New(errdefs.ErrFailedPrecondition, "command %s was created without stdin", c.ID)
	}
	buf := make([]byte, agentproto.MaxStdinChunk)
	for {
		n, rerr := io.ReadFull(r.Body, buf)
		if n > 0 {
			if err := ag.Stdin(r.Context(), c.ProcessID, buf[:n], false); err != nil {
				return err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return bodyError(rerr)
		}
	}
	if eof == "true" {
		if err := ag.Stdin(r.Context(), c.ProcessID, nil, true); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) commandSignal(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.SignalRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if _, err := agentproto.ParseSignal(req.Signal); err != nil || len(req.Signal) > 16 {
		return invalid(map[string]string{"signal": `must be a signal name or number, e.g. "SIGTERM"`})
	}
	c, ag, err := s.runningCommand(r, false)
	if err != nil {
		return err
	}
	if err := ag.Signal(r.Context(), c.ProcessID, req.Signal); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) commandResize(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.ResizeRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if req.Rows < 1 || req.Rows > 1000 || req.Cols < 1 || req.Cols > 1000 {
		return invalid(map[string]string{"rows": "rows and cols must be between 1 and 1000"})
	}
	c, ag, err := s.runningCommand(r, false)
	if err != nil {
		return err
	}
	if err := ag.Resize(r.Context(), c.ProcessID, uint16(req.Rows), uint16(req.Cols)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
