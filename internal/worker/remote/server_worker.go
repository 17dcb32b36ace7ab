package remote

import (
	"context"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/workerpb"
)

// workerService serves WorkerService: each call is the worker's own.
type workerService struct{ s *Server }

func reply[T any](m *T) *connect.Response[T] { return connect.NewResponse(m) }

func (h workerService) Ready(ctx context.Context, _ *connect.Request[workerpb.ReadyRequest]) (*connect.Response[workerpb.ReadyResponse], error) {
	if err := h.s.w.Ready(ctx); err != nil {
		return nil, err
	}
	return reply(&workerpb.ReadyResponse{}), nil
}

func (h workerService) CreateSandbox(ctx context.Context, req *connect.Request[workerpb.CreateSandboxRequest]) (*connect.Response[workerpb.CreateSandboxResponse], error) {
	st, err := h.s.w.CreateSandbox(ctx, specFromPB(req.Msg.GetSpec()))
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.CreateSandboxResponse{Status: statusToPB(st)}), nil
}

func (h workerService) DeleteSandbox(ctx context.Context, req *connect.Request[workerpb.DeleteSandboxRequest]) (*connect.Response[workerpb.DeleteSandboxResponse], error) {
	if err := h.s.w.DeleteSandbox(ctx, req.Msg.GetSandboxId()); err != nil {
		return nil, err
	}
	return reply(&workerpb.DeleteSandboxResponse{}), nil
}

func (h workerService) GetSandbox(ctx context.Context, req *connect.Request[workerpb.GetSandboxRequest]) (*connect.Response[workerpb.GetSandboxResponse], error) {
	st, err := h.s.w.Sandbox(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.GetSandboxResponse{Status: statusToPB(st)}), nil
}

func (h workerService) ListSandboxes(ctx context.Context, _ *connect.Request[workerpb.ListSandboxesRequest]) (*connect.Response[workerpb.ListSandboxesResponse], error) {
	sbs, err := h.s.w.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.ListSandboxesResponse{Sandboxes: each(sbs, statusToPB)}), nil
}

func (h workerService) CheckGuest(ctx context.Context, req *connect.Request[workerpb.CheckGuestRequest]) (*connect.Response[workerpb.CheckGuestResponse], error) {
	if _, err := h.s.w.Agent(ctx, req.Msg.GetSandboxId()); err != nil {
		return nil, err
	}
	return reply(&workerpb.CheckGuestResponse{}), nil
}

func (h workerService) SetNetworkPolicy(ctx context.Context, req *connect.Request[workerpb.SetNetworkPolicyRequest]) (*connect.Response[workerpb.SetNetworkPolicyResponse], error) {
	if err := h.s.w.SetNetworkPolicy(ctx, req.Msg.GetSandboxId(), req.Msg.GetPolicy()); err != nil {
		return nil, err
	}
	return reply(&workerpb.SetNetworkPolicyResponse{}), nil
}

func (h workerService) GetNetworkLog(ctx context.Context, req *connect.Request[workerpb.GetNetworkLogRequest]) (*connect.Response[workerpb.GetNetworkLogResponse], error) {
	recs, err := h.s.w.NetworkLog(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.GetNetworkLogResponse{Records: each(recs, recordToPB)}), nil
}

func (h workerService) WatchExits(ctx context.Context, _ *connect.Request[workerpb.WatchExitsRequest], stream *connect.ServerStream[workerpb.WatchExitsResponse]) error {
	ctx, stop := h.s.streamContext(ctx)
	defer stop()
	for {
		ex, err := h.s.exits.next(ctx)
		if err != nil {
			return h.s.streamEnd(err)
		}
		if err := stream.Send(ex); err != nil {
			h.s.exits.unget(ex)
			return err
		}
	}
}

func (h workerService) PauseSandbox(ctx context.Context, req *connect.Request[workerpb.PauseSandboxRequest]) (*connect.Response[workerpb.PauseSandboxResponse], error) {
	st, err := h.s.w.PauseSandbox(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.PauseSandboxResponse{Status: statusToPB(st)}), nil
}

func (h workerService) ResumeSandbox(ctx context.Context, req *connect.Request[workerpb.ResumeSandboxRequest]) (*connect.Response[workerpb.ResumeSandboxResponse], error) {
	st, err := h.s.w.ResumeSandbox(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.ResumeSandboxResponse{Status: statusToPB(st)}), nil
}

func (h workerService) SuspendSandbox(ctx context.Context, req *connect.Request[workerpb.SuspendSandboxRequest]) (*connect.Response[workerpb.SuspendSandboxResponse], error) {
	st, err := h.s.w.SuspendSandbox(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.SuspendSandboxResponse{Status: statusToPB(st)}), nil
}

func (h workerService) WakeSandbox(ctx context.Context, req *connect.Request[workerpb.WakeSandboxRequest]) (*connect.Response[workerpb.WakeSandboxResponse], error) {
	st, err := h.s.w.WakeSandbox(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.WakeSandboxResponse{Status: statusToPB(st)}), nil
}

func (h workerService) CreateCheckpoint(ctx context.Context, req *connect.Request[workerpb.CreateCheckpointRequest]) (*connect.Response[workerpb.CreateCheckpointResponse], error) {
	ck, err := h.s.w.Checkpoint(ctx, req.Msg.GetSandboxId(), req.Msg.GetCheckpointId())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.CreateCheckpointResponse{Checkpoint: checkpointToPB(ck)}), nil
}

func (h workerService) DeleteCheckpoint(ctx context.Context, req *connect.Request[workerpb.DeleteCheckpointRequest]) (*connect.Response[workerpb.DeleteCheckpointResponse], error) {
	if err := h.s.w.DeleteCheckpoint(ctx, req.Msg.GetCheckpointId()); err != nil {
		return nil, err
	}
	return reply(&workerpb.DeleteCheckpointResponse{}), nil
}

func (h workerService) ListCheckpoints(ctx context.Context, _ *connect.Request[workerpb.ListCheckpointsRequest]) (*connect.Response[workerpb.ListCheckpointsResponse], error) {
	cks, err := h.s.w.Checkpoints(ctx)
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.ListCheckpointsResponse{Checkpoints: each(cks, checkpointToPB)}), nil
}

func (h workerService) RestoreCheckpoint(ctx context.Context, req *connect.Request[workerpb.RestoreCheckpointRequest]) (*connect.Response[workerpb.RestoreCheckpointResponse], error) {
	st, err := h.s.w.RestoreCheckpoint(ctx, req.Msg.GetSandboxId(), req.Msg.GetCheckpointId())
	if err != nil {
		return nil, err
	}
	return reply(&workerpb.RestoreCheckpointResponse{Status: statusToPB(st)}), nil
}

func (h workerService) PrepareTemplate(ctx context.Context, req *connect.Request[workerpb.PrepareTemplateRequest]) (*connect.Response[workerpb.PrepareTemplateResponse], error) {
	if err := h.s.w.PrepareTemplate(ctx, specFromPB(req.Msg.GetSpec())); err != nil {
		return nil, err
	}
	return reply(&workerpb.PrepareTemplateResponse{}), nil
}

func (h workerService) ForgetTemplate(ctx context.Context, req *connect.Request[workerpb.ForgetTemplateRequest]) (*connect.Response[workerpb.ForgetTemplateResponse], error) {
	if err := h.s.w.ForgetTemplate(ctx, req.Msg.GetRef()); err != nil {
		return nil, err
	}
	return reply(&workerpb.ForgetTemplateResponse{}), nil
}

// streamContext is ctx, also ended when the server closes, so a stream
// that would otherwise outlive the server ends (see streamEnd).
func (s *Server) streamContext(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

// streamEnd is what a stream returns when err ended it: a server that is
// closing says it is unavailable, so the client resumes elsewhere or
// later, rather than cancelled.
func (s *Server) streamEnd(err error) error {
	if s.closing.Err() != nil {
		return errdefs.New(errdefs.ErrUnavailable, "the worker is shutting down")
	}
	return err
}
