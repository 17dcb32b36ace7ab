package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
)

func sandboxCreate(env *Env) *cobra.Command {
	var req apiv1.CreateSandboxRequest
	envs, meta := kv{}, kv{}
	return command(env, "sandbox create", func(fs *pflag.FlagSet) {
		fs.StringVar(&req.Template, "template", "base", "template name[@sha256:digest]")
		fs.IntVar(&req.VCPUs, "vcpus", 0, "vCPUs")
		fs.IntVar(&req.MemoryMiB, "memory-mib", 0, "memory in MiB")
		fs.IntVar(&req.DiskMiB, "disk-mib", 0, "root disk in MiB")
		fs.IntVar(&req.TimeoutSeconds, "timeout", 0, "time to live in seconds")
		fs.Var(envs, "env", "environment of every command (repeatable)")
		fs.Var(meta, "metadata", "metadata (repeatable)")
	}, func(ctx context.Context, cl *call) error {
		return createSandbox(ctx, env, cl, req, envs, meta)
	})
}

func createSandbox(ctx context.Context, env *Env, cl *call, req apiv1.CreateSandboxRequest, envs, meta kv) error {
	if len(envs) > 0 {
		req.Env = envs
	}
	if len(meta) > 0 {
		req.Metadata = meta
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	res, err := c.CreateSandbox(ctx, req)
	if err != nil {
		return err
	}
	sb := &res.Sandbox
	if !cl.noWait {
		op, err := c.WaitOperation(ctx, res.Operation.ID)
		if err != nil {
			return err
		}
		if sb, err = c.GetSandbox(ctx, res.Sandbox.ID); err != nil {
			return err
		}
		if op.State != apiv1.OpSucceeded {
			if cl.json {
				printJSON(env.Stdout, sb)
			}
			return opFailure(op)
		}
	}
	if cl.json {
		return printJSON(env.Stdout, sb)
	}
	fmt.Fprintln(env.Stdout, sb.ID)
	return nil
}

// opFailure is the error of an operation that did not succeed.
func opFailure(op *apiv1.Operation) error {
	if op.Error != nil {
		return &client.Error{Code: op.Error.Code, Message: fmt.Sprintf("operation %s %s: %s", op.ID, op.State, op.Error.Message), Status: 200}
	}
	return fmt.Errorf("operation %s %s: %w", op.ID, op.State, errdefs.ErrInternal)
}

func sandboxList(env *Env) *cobra.Command {
	var state string
	meta := kv{}
	return command(env, "sandbox list", func(fs *pflag.FlagSet) {
		fs.StringVar(&state, "state", "", "only these states (comma-separated)")
		fs.Var(meta, "metadata", "metadata match (repeatable)")
	}, func(ctx context.Context, cl *call) error { return listSandboxes(ctx, env, cl, state, meta) })
}

func listSandboxes(ctx context.Context, env *Env, cl *call, state string, meta kv) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	all, err := allPages(func(token string) ([]apiv1.Sandbox, string, error) {
		l, err := c.ListSandboxes(ctx, client.SandboxFilter{State: state, Metadata: meta, Page: client.Page{Size: 200, Token: token}})
		if err != nil {
			return nil, "", err
		}
		return l.Sandboxes, l.NextPageToken, nil
	})
	if err != nil {
		return err
	}
	if cl.json {
		return printJSON(env.Stdout, all)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTEMPLATE\tVCPUS\tMEMORY\tCREATED\tMETADATA")
	for _, sb := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%dMiB\t%s\t%s\n", sb.ID, sb.State, sb.Template, sb.VCPUs, sb.MemoryMiB,
			sb.CreatedAt.Local().Format(time.DateTime), sortedKV(sb.Metadata))
	}
	return tw.Flush()
}

func sandboxGet(env *Env) *cobra.Command {
	return command(env, "sandbox get", nil, func(ctx context.Context, cl *call) error { return getSandbox(ctx, env, cl) })
}

func getSandbox(ctx context.Context, env *Env, cl *call) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	sb, err := c.GetSandbox(ctx, cl.pos[0])
	if err != nil {
		return err
	}
	if cl.json {
		return printJSON(env.Stdout, sb)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nstate\t%s\ntemplate\t%s\nvcpus\t%d\nmemory\t%d MiB\ncreated\t%s\n",
		sb.ID, sb.State, sb.Template, sb.VCPUs, sb.MemoryMiB, sb.CreatedAt.Local().Format(time.RFC3339))
	if sb.ExpiresAt != nil {
		fmt.Fprintf(tw, "expires\t%s\n", sb.ExpiresAt.Local().Format(time.RFC3339))
	}
	if len(sb.Metadata) > 0 {
		fmt.Fprintf(tw, "metadata\t%s\n", sortedKV(sb.Metadata))
	}
	if sb.LastError != nil {
		fmt.Fprintf(tw, "last error\t%s: %s\n", sb.LastError.Code, sb.LastError.Message)
	}
	return tw.Flush()
}

func sandboxDelete(env *Env) *cobra.Command {
	return command(env, "sandbox delete", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		op, err := c.DeleteSandbox(ctx, cl.pos[0])
		if err != nil {
			return err
		}
		return finishOp(ctx, c, env, op, cl.noWait, cl.json)
	})
}

func opGet(env *Env, wait bool) *cobra.Command {
	name := "op get"
	if wait {
		name = "op wait"
	}
	return command(env, name, nil, func(ctx context.Context, cl *call) error { return getOp(ctx, env, cl, wait) })
}

func getOp(ctx context.Context, env *Env, cl *call, wait bool) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	var op *apiv1.Operation
	if wait {
		op, err = c.WaitOperation(ctx, cl.pos[0])
	} else {
		op, err = c.GetOperation(ctx, cl.pos[0], 0)
	}
	if err != nil {
		return err
	}
	if cl.json {
		printJSON(env.Stdout, op)
	} else {
		fmt.Fprintf(env.Stdout, "%s %s %s %s", op.ID, op.Type, op.Target, op.State)
		if op.Error != nil {
			fmt.Fprintf(env.Stdout, " %s: %s", op.Error.Code, op.Error.Message)
		}
		fmt.Fprintln(env.Stdout)
	}
	if wait && op.State != apiv1.OpSucceeded {
		return exitError{1}
	}
	return nil
}
