package cli

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
)

func sandboxCreate(ctx context.Context, args []string, env *Env) error {
	var req apiv1.CreateSandboxRequest
	envs, meta := kv{}, kv{}
	cl, err := start("sandbox create", args, func(fs *flag.FlagSet) {
		fs.StringVar(&req.Template, "template", "base", "template name[@sha256:digest]")
		fs.IntVar(&req.VCPUs, "vcpus", 0, "vCPUs")
		fs.IntVar(&req.MemoryMiB, "memory-mib", 0, "memory in MiB")
		fs.IntVar(&req.DiskMiB, "disk-mib", 0, "root disk in MiB")
		fs.IntVar(&req.TimeoutSeconds, "timeout", 0, "time to live in seconds")
		fs.Var(envs, "env", "K=V environment of every command (repeatable)")
		fs.Var(meta, "metadata", "K=V metadata (repeatable)")
	})
	if err != nil {
		return err
	}
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

func sandboxList(ctx context.Context, args []string, env *Env) error {
	var state *string
	meta := kv{}
	cl, err := start("sandbox list", args, func(fs *flag.FlagSet) {
		state = fs.String("state", "", "only these states (comma-separated)")
		fs.Var(meta, "metadata", "K=V metadata match (repeatable)")
	})
	if err != nil {
		return err
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	all := []apiv1.Sandbox{}
	f := client.SandboxFilter{State: *state, Metadata: meta, Page: client.Page{Size: 200}}
	for {
		l, err := c.ListSandboxes(ctx, f)
		if err != nil {
			return err
		}
		all = append(all, l.Sandboxes...)
		if l.NextPageToken == "" {
			break
		}
		f.Token = l.NextPageToken
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

func sandboxGet(ctx context.Context, args []string, env *Env) error {
	cl, err := start("sandbox get", args, nil)
	if err != nil {
		return err
	}
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

func sandboxDelete(ctx context.Context, args []string, env *Env) error {
	cl, err := start("sandbox delete", args, nil)
	if err != nil {
		return err
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	op, err := c.DeleteSandbox(ctx, cl.pos[0])
	if err != nil {
		return err
	}
	return finishOp(ctx, c, env, op, cl.noWait, cl.json)
}

func opGet(ctx context.Context, args []string, env *Env, wait bool) error {
	cl, err := start("op", args, nil)
	if err != nil {
		return err
	}
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

func admin(ctx context.Context, args []string, env *Env) error {
	if len(args) < 2 {
		return usagef("want admin tenant create | admin key create | admin key delete")
	}
	what := args[0] + " " + args[1]
	fs := flag.NewFlagSet("admin "+what, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	adminKey := fs.Bool("admin", false, "make an admin key")
	pos, _, err := parse(fs, args[2:])
	if err != nil {
		return err
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	switch what {
	case "tenant create":
		if err := wantArgs(pos, 1, "a tenant name"); err != nil {
			return err
		}
		t, err := c.CreateTenant(ctx, pos[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.Stdout, t)
		}
		fmt.Fprintln(env.Stdout, t.ID)
	case "key create":
		if err := wantArgs(pos, 1, "a tenant name"); err != nil {
			return err
		}
		k, err := c.CreateKey(ctx, pos[0], *adminKey)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.Stdout, k)
		}
		fmt.Fprintf(env.Stderr, "key %s for tenant %s (shown only now):\n", k.ID, k.Tenant)
		fmt.Fprintln(env.Stdout, k.Key)
	case "key delete":
		if err := wantArgs(pos, 1, "a key ID"); err != nil {
			return err
		}
		if err := c.DeleteKey(ctx, pos[0]); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.Stdout, map[string]string{"id": pos[0], "state": "revoked"})
		}
		fmt.Fprintln(env.Stdout, pos[0], "revoked")
	default:
		return usagef("unknown command admin %s", what)
	}
	return nil
}
