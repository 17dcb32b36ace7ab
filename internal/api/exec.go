package api

import (
	"net/http"
	"unicode/utf8"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/sandbox"
)

// text is output as a string when it is UTF-8, else as bytes for the _b64
// field.
func text(o sandbox.Output) (string, []byte) {
	if utf8.Valid(o.Data) {
		return string(o.Data), nil
	}
	return "", o.Data
}

// exec runs a short command to the end and answers its collected output
// (sandbox.Service.Exec).
func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.ExecRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	spec := processSpec(&req.CreateCommandRequest)
	if req.StdinData != "" {
		spec.Stdin = true
	}
	if err := sandbox.ValidateSpec(spec); err != nil { // a bad body is 400 before an unknown sandbox's 404
		return err
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	res, err := s.svc.Exec(r.Context(), sb, spec, []byte(req.StdinData), s.cfg.ExecOutputBytes)
	if err != nil {
		return err
	}
	ex := wireExit(res.Exit)
	out := apiv1.ExecResponse{CommandID: res.Command.ID, ExitCode: ex.ExitCode, Signal: ex.Signal, Reason: ex.Reason,
		StdoutTruncated: res.Stdout.Truncated, StderrTruncated: res.Stderr.Truncated}
	out.Stdout, out.StdoutB64 = text(res.Stdout)
	out.Stderr, out.StderrB64 = text(res.Stderr)
	writeJSON(w, http.StatusOK, out)
	return nil
}
