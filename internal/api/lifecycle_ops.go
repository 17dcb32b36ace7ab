package api

import (
	"net/http"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// A lifecycle operation moves a sandbox along its verb's row of the state
// machine (internal/sandbox) while the worker acts.
var (
	pauseRule   = sandbox.RuleOf(sandbox.Pause)
	suspendRule = sandbox.RuleOf(sandbox.Suspend)
	wakeRule    = sandbox.RuleOf(sandbox.Wake)
)

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	return s.submitTransition(w, r, store.OpPause, pauseRule, nil)
}

func (s *Server) suspendSandbox(w http.ResponseWriter, r *http.Request) error {
	return s.submitTransition(w, r, store.OpSuspend, suspendRule, nil)
}

func (s *Server) wakeSandbox(w http.ResponseWriter, r *http.Request) error {
	return s.submitTransition(w, r, store.OpWake, wakeRule, nil)
}

// submitTransition answers a lifecycle call: 409 with the current state
// when the sandbox is in none of t.From, else 202 with the operation.
func (s *Server) submitTransition(w http.ResponseWriter, r *http.Request, typ store.OperationType, t sandbox.Rule, params any) error {
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	op, err := s.svc.SubmitOn(r.Context(), sb, typ, t.From, params)
	if err != nil {
		return err
	}
	s.log(r).Info("sandbox "+string(typ)+" submitted", "sandbox", sb.ID, "op", op.ID)
	writeJSON(w, http.StatusAccepted, apiv1.OperationResponse{Operation: toOperation(op)})
	return nil
}

// usageOf is the usage a worker reports of a sandbox.
func usageOf(st worker.SandboxStatus) *apiv1.Usage {
	return &apiv1.Usage{MemoryBytes: st.MemoryBytes, DiskBytes: st.DiskBytes, SnapshotBytes: st.SnapshotBytes}
}
