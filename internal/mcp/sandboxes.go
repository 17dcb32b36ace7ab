package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
)

// lifecycleWait bounds how long a tool waits for a lifecycle operation (VMs
// boot slowly without KVM).
const lifecycleWait = 10 * time.Minute

func ptr[T any](v T) *T { return &v }

// annotations builds the hints of a tool. SPACE's tools act on sandboxes
// only (a closed world) except where they run code.
func annotations(title string, readOnly, destructive, idempotent, openWorld bool) *mcpsdk.ToolAnnotations {
	return &mcpsdk.ToolAnnotations{Title: title, ReadOnlyHint: readOnly, DestructiveHint: ptr(destructive),
		IdempotentHint: idempotent, OpenWorldHint: ptr(openWorld)}
}

// addTool registers a typed tool whose handler gets the caller's API
// client; its errors become tool results with isError and the API's message.
func addTool[In, Out any](s *Server, t *mcpsdk.Tool, h func(context.Context, *client.Client, In) (Out, error)) {
	mcpsdk.AddTool(s.mcp, t, func(ctx context.Context, req *mcpsdk.CallToolRequest, in In) (*mcpsdk.CallToolResult, Out, error) {
		var zero Out
		c, err := s.clientFor(req)
		if err != nil {
			return nil, zero, err
		}
		out, err := h(ctx, c, in)
		if err != nil {
			s.cfg.Logger.Debug("tool failed", "tool", t.Name, "err", err)
			return nil, zero, toolError(err)
		}
		return nil, out, nil
	})
}

// idempotent runs a POST with a fresh Idempotency-Key and repeats it once
// with the same key when the connection failed, so it never acts twice.
func idempotent[T any](ctx context.Context, call func(...client.CallOption) (T, error)) (T, error) {
	var b [16]byte
	rand.Read(b[:])
	key := client.WithIdempotencyKey("mcp-" + hex.EncodeToString(b[:]))
	out, err := call(key)
	for i := 0; i < 3 && errors.Is(err, errdefs.ErrUnavailable) && ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(i+1) * 500 * time.Millisecond):
		}
		out, err = call(key)
	}
	return out, err
}

// waitOp waits for an operation to end and fails unless it succeeded.
func waitOp(ctx context.Context, c *client.Client, op *apiv1.Operation) (*apiv1.Operation, error) {
	ctx, cancel := context.WithTimeout(ctx, lifecycleWait)
	defer cancel()
	done, err := c.WaitOperation(ctx, op.ID)
	if err != nil {
		return nil, fmt.Errorf("waiting for operation %s (%s): %w", op.ID, op.Type, err)
	}
	if done.State != apiv1.OpSucceeded {
		msg := done.State
		if done.Error != nil {
			msg = done.Error.Code + ": " + done.Error.Message
		}
		return done, fmt.Errorf("operation %s (%s) %s: %s", done.ID, done.Type, done.State, msg)
	}
	return done, nil
}

// SandboxInfo is what tools say about a sandbox.
type SandboxInfo struct {
	ID        string            `json:"id" jsonschema:"sandbox id (sbx_…)"`
	State     string            `json:"state" jsonschema:"creating, running, paused, suspended, deleted, failed, …"`
	Template  string            `json:"template"`
	VCPUs     int               `json:"vcpus"`
	MemoryMiB int               `json:"memory_mib"`
	DiskMiB   int               `json:"disk_mib"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Network   map[string]any    `json:"network,omitempty" jsonschema:"the network policy"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty" jsonschema:"when the sandbox is deleted unless kept"`
}

func sandboxInfo(sb *apiv1.Sandbox) SandboxInfo {
	info := SandboxInfo{ID: sb.ID, State: sb.State, Template: sb.Template, VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB,
		DiskMiB: sb.DiskMiB, Metadata: sb.Metadata, CreatedAt: sb.CreatedAt, ExpiresAt: sb.ExpiresAt}
	if len(sb.Network) > 0 {
		json.Unmarshal(sb.Network, &info.Network) // a policy is an object; anything else is left out
	}
	return info
}

// CreateSandboxArgs are create_sandbox's arguments.
type CreateSandboxArgs struct {
	Template       string         `json:"template,omitempty" jsonschema:"template name, or name@sha256:digest (default base)"`
	MemoryMiB      int            `json:"memory_mib,omitempty" jsonschema:"guest memory in MiB (default: the template's)"`
	VCPUs          int            `json:"vcpus,omitempty" jsonschema:"virtual CPUs (default: the template's)"`
	TimeoutSeconds int            `json:"timeout_seconds,omitempty" jsonschema:"delete the sandbox this many seconds after creation (default: the server's)"`
	Network        map[string]any `json:"network,omitempty" jsonschema:"network policy, e.g. {\"egress\":{\"default\":\"deny\",\"allow\":[\"pypi.org\"]}}; egress is denied by default"`
}

// SandboxIDArgs name one sandbox.
type SandboxIDArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox id (sbx_…)"`
}

// SandboxList is list_sandboxes' result.
type SandboxList struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
}

// LifecycleResult is what a lifecycle tool returns once its operation ended.
type LifecycleResult struct {
	SandboxID   string `json:"sandbox_id"`
	State       string `json:"state" jsonschema:"the sandbox's state after the operation"`
	OperationID string `json:"operation_id"`
}

// CheckpointArgs are checkpoint_sandbox's arguments.
type CheckpointArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox id (sbx_…)"`
	Name      string `json:"name,omitempty" jsonschema:"a name for the checkpoint"`
}

// CheckpointInfo describes a checkpoint.
type CheckpointInfo struct {
	CheckpointID string    `json:"checkpoint_id" jsonschema:"checkpoint id (ckpt_…), for restore_sandbox and branch_sandbox"`
	SandboxID    string    `json:"sandbox_id"`
	Name         string    `json:"name,omitempty"`
	SizeBytes    int64     `json:"size_bytes"`
	CreatedAt    time.Time `json:"created_at"`
}

// RestoreArgs are restore_sandbox's arguments.
type RestoreArgs struct {
	SandboxID    string `json:"sandbox_id" jsonschema:"sandbox id (sbx_…)"`
	CheckpointID string `json:"checkpoint_id" jsonschema:"checkpoint id (ckpt_…) of this sandbox"`
}

// BranchArgs are branch_sandbox's arguments.
type BranchArgs struct {
	CheckpointID string `json:"checkpoint_id" jsonschema:"checkpoint id (ckpt_…) to start the new sandbox from"`
}

// DeleteResult is delete_sandbox's result.
type DeleteResult struct {
	SandboxID   string `json:"sandbox_id"`
	Deleted     bool   `json:"deleted"`
	OperationID string `json:"operation_id"`
}

func (s *Server) addSandboxTools() {
	addTool(s, &mcpsdk.Tool{Name: "create_sandbox",
		Description: "Create a sandbox (its own microVM with a writable root filesystem) and wait until it runs. " +
			"Returns its id for the other tools. Egress network access is denied unless network allows it.",
		Annotations: annotations("Create sandbox", false, false, false, false)},
		func(ctx context.Context, c *client.Client, in CreateSandboxArgs) (SandboxInfo, error) {
			req := apiv1.CreateSandboxRequest{Template: in.Template, MemoryMiB: in.MemoryMiB, VCPUs: in.VCPUs,
				TimeoutSeconds: in.TimeoutSeconds, Metadata: map[string]string{"created_by": "mcp"}}
			if req.Template == "" {
				req.Template = "base"
			}
			if in.Network != nil {
				b, err := json.Marshal(in.Network)
				if err != nil {
					return SandboxInfo{}, fmt.Errorf("network: %v", err)
				}
				req.Network = b
			}
			return s.createAndWait(ctx, c, req)
		})

	addTool(s, &mcpsdk.Tool{Name: "list_sandboxes",
		Description: "List the caller's sandboxes that are not deleted, with their state.",
		Annotations: annotations("List sandboxes", true, false, true, false)},
		func(ctx context.Context, c *client.Client, _ struct{}) (SandboxList, error) {
			out := SandboxList{Sandboxes: []SandboxInfo{}}
			f := client.SandboxFilter{Page: client.Page{Size: 100}}
			for {
				page, err := c.ListSandboxes(ctx, f)
				if err != nil {
					return out, err
				}
				for i := range page.Sandboxes {
					if page.Sandboxes[i].State != apiv1.SandboxDeleted {
						out.Sandboxes = append(out.Sandboxes, sandboxInfo(&page.Sandboxes[i]))
					}
				}
				if page.NextPageToken == "" || len(out.Sandboxes) >= 1000 {
					return out, nil
				}
				f.Page.Token = page.NextPageToken
			}
		})

	type starter = func(context.Context, string, ...client.CallOption) (*apiv1.Operation, error)
	lifecycle := func(name, title, desc string, verb func(*client.Client) starter) {
		addTool(s, &mcpsdk.Tool{Name: name, Description: desc, Annotations: annotations(title, false, false, true, false)},
			func(ctx context.Context, c *client.Client, in SandboxIDArgs) (LifecycleResult, error) {
				return s.lifecycle(ctx, c, in.SandboxID, verb(c))
			})
	}
	lifecycle("pause_sandbox", "Pause sandbox",
		"Pause a running sandbox: its vCPUs stop, memory stays resident; wake_sandbox resumes it. Waits until it is paused.",
		func(c *client.Client) starter { return c.PauseSandbox })
	lifecycle("suspend_sandbox", "Suspend sandbox",
		"Suspend a running or paused sandbox: memory, processes and files are saved durably and the VM is released; "+
			"wake_sandbox restores it exactly. Waits until it is suspended.",
		func(c *client.Client) starter { return c.SuspendSandbox })
	lifecycle("wake_sandbox", "Wake sandbox",
		"Wake a paused or suspended sandbox, with the same processes, memory and files. Waits until it runs.",
		func(c *client.Client) starter { return c.WakeSandbox })

	addTool(s, &mcpsdk.Tool{Name: "checkpoint_sandbox",
		Description: "Take a checkpoint of a sandbox (disk, memory and processes) while it keeps running. " +
			"Use the checkpoint id with restore_sandbox (roll back) or branch_sandbox (a new sandbox from it).",
		Annotations: annotations("Checkpoint sandbox", false, false, false, false)},
		func(ctx context.Context, c *client.Client, in CheckpointArgs) (CheckpointInfo, error) {
			if err := needID("sandbox_id", in.SandboxID); err != nil {
				return CheckpointInfo{}, err
			}
			res, err := idempotent(ctx, func(o ...client.CallOption) (*apiv1.CheckpointAndOperation, error) {
				return c.CreateCheckpoint(ctx, in.SandboxID, in.Name, o...)
			})
			if err != nil {
				return CheckpointInfo{}, err
			}
			if _, err := waitOp(ctx, c, &res.Operation); err != nil {
				return CheckpointInfo{}, err
			}
			ck, err := c.GetCheckpoint(ctx, res.Checkpoint.ID)
			if err != nil {
				return CheckpointInfo{}, err
			}
			return CheckpointInfo{CheckpointID: ck.ID, SandboxID: ck.Sandbox, Name: ck.Name, SizeBytes: ck.SizeBytes, CreatedAt: ck.CreatedAt}, nil
		})

	addTool(s, &mcpsdk.Tool{Name: "restore_sandbox",
		Description: "Roll a sandbox back in place to one of its checkpoints: everything since the checkpoint is lost. " +
			"Waits until it runs again.",
		Annotations: annotations("Restore sandbox", false, true, true, false)},
		func(ctx context.Context, c *client.Client, in RestoreArgs) (LifecycleResult, error) {
			if err := needID("checkpoint_id", in.CheckpointID); err != nil {
				return LifecycleResult{}, err
			}
			return s.lifecycle(ctx, c, in.SandboxID, func(ctx context.Context, id string, o ...client.CallOption) (*apiv1.Operation, error) {
				return c.RestoreSandbox(ctx, id, in.CheckpointID, o...)
			})
		})

	addTool(s, &mcpsdk.Tool{Name: "branch_sandbox",
		Description: "Create a new sandbox from a checkpoint (a branch): it starts with the checkpoint's files, memory " +
			"and processes and shares nothing writable with the original. Waits until it runs.",
		Annotations: annotations("Branch sandbox", false, false, false, false)},
		func(ctx context.Context, c *client.Client, in BranchArgs) (SandboxInfo, error) {
			if err := needID("checkpoint_id", in.CheckpointID); err != nil {
				return SandboxInfo{}, err
			}
			return s.createAndWait(ctx, c, apiv1.CreateSandboxRequest{FromCheckpoint: in.CheckpointID,
				Metadata: map[string]string{"created_by": "mcp"}})
		})

	addTool(s, &mcpsdk.Tool{Name: "delete_sandbox",
		Description: "Delete a sandbox and everything in it (its checkpoints stay). Waits until it is deleted.",
		Annotations: annotations("Delete sandbox", false, true, true, false)},
		func(ctx context.Context, c *client.Client, in SandboxIDArgs) (DeleteResult, error) {
			if err := needID("sandbox_id", in.SandboxID); err != nil {
				return DeleteResult{}, err
			}
			op, err := c.DeleteSandbox(ctx, in.SandboxID)
			if err != nil {
				return DeleteResult{}, err
			}
			if _, err := waitOp(ctx, c, op); err != nil {
				return DeleteResult{}, err
			}
			return DeleteResult{SandboxID: in.SandboxID, Deleted: true, OperationID: op.ID}, nil
		})
}

func needID(name, v string) error {
	if v == "" {
		return fmt.Errorf("invalid_argument: %s is required", name)
	}
	return nil
}

// createAndWait creates a sandbox (with an idempotency key, so a retried
// request never makes two) and waits until it runs.
func (s *Server) createAndWait(ctx context.Context, c *client.Client, req apiv1.CreateSandboxRequest) (SandboxInfo, error) {
	res, err := idempotent(ctx, func(o ...client.CallOption) (*apiv1.SandboxAndOperation, error) {
		return c.CreateSandbox(ctx, req, o...)
	})
	if err != nil {
		return SandboxInfo{}, err
	}
	if _, err := waitOp(ctx, c, &res.Operation); err != nil {
		return SandboxInfo{}, fmt.Errorf("sandbox %s: %w", res.Sandbox.ID, err)
	}
	sb, err := c.GetSandbox(ctx, res.Sandbox.ID)
	if err != nil {
		return SandboxInfo{}, err
	}
	return sandboxInfo(sb), nil
}

// lifecycle starts a lifecycle operation on a sandbox and waits for it.
func (s *Server) lifecycle(ctx context.Context, c *client.Client, id string, start func(context.Context, string, ...client.CallOption) (*apiv1.Operation, error)) (LifecycleResult, error) {
	if err := needID("sandbox_id", id); err != nil {
		return LifecycleResult{}, err
	}
	op, err := idempotent(ctx, func(o ...client.CallOption) (*apiv1.Operation, error) { return start(ctx, id, o...) })
	if err != nil {
		return LifecycleResult{}, err
	}
	if _, err := waitOp(ctx, c, op); err != nil {
		return LifecycleResult{}, err
	}
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return LifecycleResult{}, err
	}
	return LifecycleResult{SandboxID: id, State: sb.State, OperationID: op.ID}, nil
}
