package remote

import (
	"context"
	"encoding/json"
	"time"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb"
)

// The Worker and Lifecycle calls: each is one call of WorkerService.

func (c *Client) Ready(ctx context.Context) error {
	_, err := call(ctx, "ready", true, c.workers.Ready, &workerpb.ReadyRequest{})
	return err
}

func (c *Client) CreateSandbox(ctx context.Context, spec worker.SandboxSpec) (worker.SandboxStatus, error) {
	resp, err := call(ctx, "create sandbox", false, c.workers.CreateSandbox, &workerpb.CreateSandboxRequest{Spec: specToPB(spec)})
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return statusFromPB(resp.GetStatus()), nil
}

func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	_, err := call(ctx, "delete sandbox", true, c.workers.DeleteSandbox, &workerpb.DeleteSandboxRequest{SandboxId: id})
	return err
}

func (c *Client) Sandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	resp, err := call(ctx, "sandbox", true, c.workers.GetSandbox, &workerpb.GetSandboxRequest{SandboxId: id})
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return statusFromPB(resp.GetStatus()), nil
}

func (c *Client) Sandboxes(ctx context.Context) ([]worker.SandboxStatus, error) {
	resp, err := call(ctx, "sandboxes", true, c.workers.ListSandboxes, &workerpb.ListSandboxesRequest{})
	if err != nil {
		return nil, err
	}
	return each(resp.GetSandboxes(), statusFromPB), nil
}

// Agent checks that the sandbox's guest can be called (the worker's own
// Agent answers) and returns a Guest whose calls go over the protocol.
func (c *Client) Agent(ctx context.Context, id string) (worker.Guest, error) {
	if _, err := call(ctx, "agent", true, c.workers.CheckGuest, &workerpb.CheckGuestRequest{SandboxId: id}); err != nil {
		return nil, err
	}
	return &guest{c: c, sandbox: id}, nil
}

func (c *Client) SetNetworkPolicy(ctx context.Context, id string, policy json.RawMessage) error {
	_, err := call(ctx, "set network policy", true, c.workers.SetNetworkPolicy,
		&workerpb.SetNetworkPolicyRequest{SandboxId: id, Policy: policy})
	return err
}

func (c *Client) NetworkLog(ctx context.Context, id string) ([]worker.NetworkRecord, error) {
	resp, err := call(ctx, "network log", true, c.workers.GetNetworkLog, &workerpb.GetNetworkLogRequest{SandboxId: id})
	if err != nil {
		return nil, err
	}
	return each(resp.GetRecords(), recordFromPB), nil
}

func (c *Client) PauseSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	resp, err := call(ctx, "pause", true, c.workers.PauseSandbox, &workerpb.PauseSandboxRequest{SandboxId: id})
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return statusFromPB(resp.GetStatus()), nil
}

func (c *Client) ResumeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	resp, err := call(ctx, "resume", true, c.workers.ResumeSandbox, &workerpb.ResumeSandboxRequest{SandboxId: id})
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return statusFromPB(resp.GetStatus()), nil
}

func (c *Client) SuspendSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	resp, err := call(ctx, "suspend", true, c.workers.SuspendSandbox, &workerpb.SuspendSandboxRequest{SandboxId: id})
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return statusFromPB(resp.GetStatus()), nil
}

func (c *Client) WakeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	resp, err := call(ctx, "wake", true, c.workers.WakeSandbox, &workerpb.WakeSandboxRequest{SandboxId: id})
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return statusFromPB(resp.GetStatus()), nil
}

func (c *Client) Checkpoint(ctx context.Context, sandboxID, checkpointID string) (worker.CheckpointStatus, error) {
	resp, err := call(ctx, "checkpoint", false, c.workers.CreateCheckpoint,
		&workerpb.CreateCheckpointRequest{SandboxId: sandboxID, CheckpointId: checkpointID})
	if err != nil {
		return worker.CheckpointStatus{}, err
	}
	return checkpointFromPB(resp.GetCheckpoint()), nil
}

func (c *Client) DeleteCheckpoint(ctx context.Context, checkpointID string) error {
	_, err := call(ctx, "delete checkpoint", true, c.workers.DeleteCheckpoint,
		&workerpb.DeleteCheckpointRequest{CheckpointId: checkpointID})
	return err
}

func (c *Client) Checkpoints(ctx context.Context) ([]worker.CheckpointStatus, error) {
	resp, err := call(ctx, "checkpoints", true, c.workers.ListCheckpoints, &workerpb.ListCheckpointsRequest{})
	if err != nil {
		return nil, err
	}
	return each(resp.GetCheckpoints(), checkpointFromPB), nil
}

func (c *Client) RestoreCheckpoint(ctx context.Context, sandboxID, checkpointID string) (worker.SandboxStatus, error) {
	resp, err := call(ctx, "restore checkpoint", false, c.workers.RestoreCheckpoint,
		&workerpb.RestoreCheckpointRequest{SandboxId: sandboxID, CheckpointId: checkpointID})
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return statusFromPB(resp.GetStatus()), nil
}

func (c *Client) PrepareTemplate(ctx context.Context, spec worker.SandboxSpec) error {
	_, err := call(ctx, "prepare template", true, c.workers.PrepareTemplate, &workerpb.PrepareTemplateRequest{Spec: specToPB(spec)})
	return err
}

func (c *Client) ForgetTemplate(ctx context.Context, ref string) error {
	_, err := call(ctx, "forget template", true, c.workers.ForgetTemplate, &workerpb.ForgetTemplateRequest{Ref: ref})
	return err
}

// Exits delivers the worker's VM exits. The first call starts watching
// them (until Close), over one stream that is opened again whenever it
// breaks; until then they wait on the worker.
func (c *Client) Exits() <-chan worker.Exit {
	c.exitsOnce.Do(func() {
		c.watching.Add(1)
		go c.watchExits()
	})
	return c.exits
}

func (c *Client) watchExits() {
	defer c.watching.Done()
	backoff := retryBackoff{}
	for c.closing.Err() == nil {
		stream, err := c.workers.WatchExits(c.closing, connect.NewRequest(&workerpb.WatchExitsRequest{}))
		if err == nil {
			for stream.Receive() {
				backoff.reset()
				m := stream.Msg()
				ex := worker.Exit{SandboxID: m.GetSandboxId(),
					Err: errdefs.New(errdefs.FromCode(m.GetErrorClass()), "%s", m.GetErrorMessage())}
				select {
				case c.exits <- ex:
				case <-c.closing.Done():
					stream.Close()
					return
				}
			}
			err = stream.Err()
			stream.Close()
		}
		if c.closing.Err() != nil {
			return
		}
		c.log.Debug("exit watch broke; watching again", "err", err)
		if !backoff.wait(c.closing) {
			return
		}
	}
}

// retryBackoff spaces the attempts of a stream that is opened again after
// its link broke: 100ms, doubling to 2s.
type retryBackoff struct{ d time.Duration }

func (b *retryBackoff) reset() { b.d = 0 }

// wait sleeps the next delay; false when ctx ended first.
func (b *retryBackoff) wait(ctx context.Context) bool {
	b.d = min(max(2*b.d, 100*time.Millisecond), 2*time.Second)
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
