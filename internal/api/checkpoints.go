package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
)

func toCheckpoint(c *store.Checkpoint) apiv1.Checkpoint {
	return apiv1.Checkpoint{ID: c.ID, Sandbox: c.SandboxID, Name: c.Name, Parent: c.Parent, State: string(c.State),
		SizeBytes: c.SizeBytes, CreatedAt: c.CreatedAt.UTC()}
}

// checkpoint loads the caller's checkpoint with the given id (404 for
// malformed, unknown and other tenants' ids alike).
func (s *Server) checkpoint(ctx context.Context, id string) (*store.Checkpoint, error) {
	if !validID(id, store.PrefixCheckpoint) {
		return nil, errdefs.New(errdefs.ErrNotFound, "checkpoint %q not found", id)
	}
	ck, err := s.svc.GetCheckpoint(ctx, principal(ctx).TenantID, id)
	if err != nil {
		return nil, notFoundAs(err, "checkpoint", id)
	}
	return ck, nil
}

// readyCheckpoint is checkpoint, with 409 (details.state) unless it is ready.
func (s *Server) readyCheckpoint(ctx context.Context, id string) (*store.Checkpoint, error) {
	ck, err := s.checkpoint(ctx, id)
	if err != nil {
		return nil, err
	}
	if ck.State != store.CheckpointReady {
		return nil, errdefs.New(errdefs.ErrConflict, "checkpoint %s is %s", ck.ID, ck.State).
			WithDetails(map[string]any{"state": string(ck.State)})
	}
	return ck, nil
}

func (s *Server) createCheckpoint(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.CreateCheckpointRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if req.Name != "" && !sandbox.ValidMetadataKey(req.Name) {
		return invalid(map[string]string{"name": "1-63 characters of letters, digits and _ . - /"})
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	ck, op, err := s.svc.Checkpoint(r.Context(), sb, req.Name)
	if err != nil {
		return err
	}
	s.log(r).Info("checkpoint submitted", "sandbox", sb.ID, "checkpoint", ck.ID, "op", op.ID)
	writeJSON(w, http.StatusAccepted, apiv1.CheckpointAndOperation{Checkpoint: toCheckpoint(ck), Operation: toOperation(op)})
	return nil
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request) error {
	pr, err := pageRequest(r)
	if err != nil {
		return err
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	page, err := s.svc.ListCheckpoints(r.Context(), sb.TenantID, sb.ID, pr)
	if err != nil {
		return err
	}
	out := apiv1.CheckpointList{Checkpoints: []apiv1.Checkpoint{}, NextPageToken: page.NextPageToken}
	for _, c := range page.Items {
		out.Checkpoints = append(out.Checkpoints, toCheckpoint(c))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getCheckpoint(w http.ResponseWriter, r *http.Request) error {
	ck, err := s.checkpoint(r.Context(), r.PathValue("ckpt"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toCheckpoint(ck))
	return nil
}

// deleteCheckpoint removes a checkpoint's files and record at once (204;
// see sandbox.Service.DeleteCheckpoint). A checkpoint still being made is
// 409.
func (s *Server) deleteCheckpoint(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	ck, err := s.checkpoint(ctx, r.PathValue("ckpt"))
	if err != nil {
		return err
	}
	if err := s.svc.DeleteCheckpoint(ctx, ck); err != nil {
		return err
	}
	s.log(r).Info("checkpoint deleted", "checkpoint", ck.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) restoreSandbox(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.RestoreRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if req.Checkpoint == "" {
		return invalid(map[string]string{"checkpoint": "required"})
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	ck, err := s.readyCheckpoint(ctx, req.Checkpoint)
	if err != nil {
		return err
	}
	op, err := s.svc.Restore(ctx, sb, ck)
	if errors.Is(err, sandbox.ErrNotInLineage) {
		return invalid(map[string]string{"checkpoint": "must be a checkpoint of this sandbox or of a sandbox it was branched from"})
	}
	if err != nil {
		return err
	}
	s.log(r).Info("sandbox restore submitted", "sandbox", sb.ID, "op", op.ID, "checkpoint", ck.ID)
	writeJSON(w, http.StatusAccepted, apiv1.OperationResponse{Operation: toOperation(op)})
	return nil
}
