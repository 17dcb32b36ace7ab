package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
)

// finishOp waits for op (unless noWait) and prints it.
func finishOp(ctx context.Context, c *client.Client, env *Env, op *apiv1.Operation, noWait, asJSON bool) error {
	var err error
	if !noWait {
		if op, err = c.WaitOperation(ctx, op.ID); err != nil {
			return err
		}
	}
	if asJSON {
		printJSON(env.Stdout, op)
	} else {
		fmt.Fprintf(env.Stdout, "%s %s\n", op.ID, op.State)
	}
	if op.Done() && op.State != apiv1.OpSucceeded {
		return opFailure(op)
	}
	return nil
}

// sandboxLifecycle is `space sandbox pause|suspend|wake ID`.
func sandboxLifecycle(env *Env, verb string) *cobra.Command {
	return command(env, "sandbox "+verb, nil, func(ctx context.Context, cl *call) error { return lifecycle(ctx, env, cl, verb) })
}

func lifecycle(ctx context.Context, env *Env, cl *call, verb string) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	call := map[string]func(context.Context, string, ...client.CallOption) (*apiv1.Operation, error){
		"pause": c.PauseSandbox, "suspend": c.SuspendSandbox, "wake": c.WakeSandbox,
	}[verb]
	op, err := call(ctx, cl.pos[0])
	if err != nil {
		return err
	}
	return finishOp(ctx, c, env, op, cl.noWait, cl.json)
}

// sandboxKeep is `space sandbox keep ID SECONDS`.
func sandboxKeep(env *Env) *cobra.Command {
	return command(env, "sandbox keep", nil, func(ctx context.Context, cl *call) error { return keep(ctx, env, cl) })
}

func keep(ctx context.Context, env *Env, cl *call) error {
	secs, err := strconv.Atoi(cl.pos[1])
	if err != nil {
		return usagef("seconds must be a whole number")
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	sb, err := c.KeepSandbox(ctx, cl.pos[0], secs)
	if err != nil {
		return err
	}
	if cl.json {
		return printJSON(env.Stdout, sb)
	}
	fmt.Fprintf(env.Stdout, "%s expires %s\n", sb.ID, sb.ExpiresAt.Format("2006-01-02T15:04:05Z"))
	return nil
}

// restore is `space restore ID CHECKPOINT`.
func restore(env *Env) *cobra.Command {
	return command(env, "restore", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		op, err := c.RestoreSandbox(ctx, cl.pos[0], cl.pos[1])
		if err != nil {
			return err
		}
		return finishOp(ctx, c, env, op, cl.noWait, cl.json)
	})
}

// checkpointCmd is `space checkpoint create|list|get|delete`.
func checkpointCmd(env *Env, verb string) *cobra.Command {
	var name string
	var flags func(fs *pflag.FlagSet)
	if verb == "create" {
		flags = func(fs *pflag.FlagSet) { fs.StringVar(&name, "name", "", "checkpoint name") }
	}
	return command(env, "checkpoint "+verb, flags, func(ctx context.Context, cl *call) error {
		return checkpoint(ctx, env, cl, verb, name)
	})
}

func checkpoint(ctx context.Context, env *Env, cl *call, verb, name string) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	switch verb {
	case "create":
		res, err := c.CreateCheckpoint(ctx, cl.pos[0], name)
		if err != nil {
			return err
		}
		if err := finishOp(ctx, c, &Env{Stdout: io.Discard, Stderr: env.Stderr}, &res.Operation, cl.noWait, false); err != nil {
			return err
		}
		ck, err := c.GetCheckpoint(ctx, res.Checkpoint.ID)
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, ck)
		}
		fmt.Fprintln(env.Stdout, ck.ID)
	case "list":
		l, err := c.ListCheckpoints(ctx, cl.pos[0], client.Page{Size: 1000})
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, l)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSTATE\tSIZE\tPARENT\tCREATED")
		for _, ck := range l.Checkpoints {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", ck.ID, ck.Name, ck.State, ck.SizeBytes, ck.Parent, ck.CreatedAt.Format("2006-01-02T15:04:05Z"))
		}
		return tw.Flush()
	case "get":
		ck, err := c.GetCheckpoint(ctx, cl.pos[0])
		if err != nil {
			return err
		}
		return printJSON(env.Stdout, ck)
	case "delete":
		return c.DeleteCheckpoint(ctx, cl.pos[0])
	}
	return nil
}
