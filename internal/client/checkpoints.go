package client

import (
	"context"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// CreateCheckpoint starts checkpointing a running or paused sandbox; the
// checkpoint is ready when the returned operation succeeds.
func (c *Client) CreateCheckpoint(ctx context.Context, sandbox, name string, opts ...CallOption) (*apiv1.CheckpointAndOperation, error) {
	var out apiv1.CheckpointAndOperation
	return &out, c.do(ctx, "POST", "/v1/sandboxes/"+esc(sandbox)+"/checkpoints", nil,
		apiv1.CreateCheckpointRequest{Name: name}, &out, opts...)
}

// ListCheckpoints lists a sandbox's checkpoints, oldest first.
func (c *Client) ListCheckpoints(ctx context.Context, sandbox string, p Page) (*apiv1.CheckpointList, error) {
	var out apiv1.CheckpointList
	return &out, c.do(ctx, "GET", "/v1/sandboxes/"+esc(sandbox)+"/checkpoints", p.values(nil), nil, &out)
}

// GetCheckpoint returns a checkpoint.
func (c *Client) GetCheckpoint(ctx context.Context, id string) (*apiv1.Checkpoint, error) {
	var out apiv1.Checkpoint
	return &out, c.do(ctx, "GET", "/v1/checkpoints/"+esc(id), nil, nil, &out)
}

// DeleteCheckpoint deletes a checkpoint (at once).
func (c *Client) DeleteCheckpoint(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/v1/checkpoints/"+esc(id), nil, nil, nil)
}

// RestoreSandbox starts rolling a sandbox back in place to a checkpoint.
func (c *Client) RestoreSandbox(ctx context.Context, sandbox, checkpoint string, opts ...CallOption) (*apiv1.Operation, error) {
	var out apiv1.OperationResponse
	return &out.Operation, c.do(ctx, "POST", "/v1/sandboxes/"+esc(sandbox)+"/restore", nil,
		apiv1.RestoreRequest{Checkpoint: checkpoint}, &out, opts...)
}
