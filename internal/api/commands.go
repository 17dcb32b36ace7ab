package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
)

// The bound of a command's timeout the OpenAPI document states is the
// domain's.
const maxCommandTimeout = sandbox.MaxCommandTimeout

// processSpec is the domain's form of a command request (the Service
// validates it when it stores the command).
func processSpec(req *apiv1.CreateCommandRequest) agentproto.ProcessSpec {
	spec := agentproto.ProcessSpec{Argv: req.Argv, Shell: req.Shell, Cwd: req.Cwd, Env: req.Env,
		User: req.User, Stdin: req.Stdin, TimeoutSeconds: req.TimeoutSeconds}
	if req.PTY != nil {
		spec.PTY = sandbox.PTYOf(req.PTY.Rows, req.PTY.Cols)
	}
	return spec
}

func (s *Server) createCommand(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.CreateCommandRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	spec := processSpec(&req)
	if err := sandbox.ValidateSpec(spec); err != nil { // a bad body is 400 before an unknown sandbox's 404
		return err
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	c, err := s.svc.NewCommand(r.Context(), sb, spec)
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
	page, err := s.svc.CommandPage(r.Context(), sb, pr)
	if err != nil {
		return err
	}
	out := apiv1.CommandList{Commands: []apiv1.Command{}, NextPageToken: page.NextPageToken}
	for _, c := range page.Items {
		out.Commands = append(out.Commands, toCommand(c))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) commandStdin(w http.ResponseWriter, r *http.Request) error {
	eof := r.URL.Query().Get("eof")
	if eof != "" && eof != "true" && eof != "false" {
		return invalid(map[string]string{"eof": "must be true or false"})
	}
	sb, c, err := s.command(r)
	if err != nil {
		return err
	}
	if err := s.svc.Stdin(r.Context(), sb, c, r.Body, eof == "true"); err != nil {
		var re *sandbox.ReadError
		if errors.As(err, &re) {
			return bodyError(re.Err)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) commandSignal(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.SignalRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if err := sandbox.ValidSignal(req.Signal); err != nil {
		return err
	}
	sb, c, err := s.command(r)
	if err != nil {
		return err
	}
	if err := s.svc.Signal(r.Context(), sb, c, req.Signal); err != nil {
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
	if err := sandbox.ValidResize(req.Rows, req.Cols); err != nil {
		return err
	}
	sb, c, err := s.command(r)
	if err != nil {
		return err
	}
	if err := s.svc.Resize(r.Context(), sb, c, req.Rows, req.Cols); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
