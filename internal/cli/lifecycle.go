package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

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

// sandboxLifecycle runs `space sandbox pause|suspend|wake ID`.
func sandboxLifecycle(ctx context.Context, verb string, args []string, env *Env) error {
	fs := flag.NewFlagSet("sandbox "+verb, flag.ContinueOnError)
	noWait := fs.Bool("no-wait", false, "return once the call is accepted")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "a sandbox ID"); err != nil {
		return err
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	call := map[string]func(context.Context, string, ...client.CallOption) (*apiv1.Operation, error){
		"pause": c.PauseSandbox, "suspend": c.SuspendSandbox, "wake": c.WakeSandbox,
	}[verb]
	op, err := call(ctx, pos[0])
	if err != nil {
		return err
	}
	return finishOp(ctx, c, env, op, *noWait, *asJSON)
}

// sandboxKeep runs `space sandbox keep ID SECONDS`.
func sandboxKeep(ctx context.Context, args []string, env *Env) error {
	fs := flag.NewFlagSet("sandbox keep", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 2, "a sandbox ID and a number of seconds"); err != nil {
		return err
	}
	secs, err := strconv.Atoi(pos[1])
	if err != nil {
		return usagef("seconds must be a whole number")
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	sb, err := c.KeepSandbox(ctx, pos[0], secs)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env.Stdout, sb)
	}
	fmt.Fprintf(env.Stdout, "%s expires %s\n", sb.ID, sb.ExpiresAt.Format("2006-01-02T15:04:05Z"))
	return nil
}

// restore runs `space restore ID CHECKPOINT`.
func restore(ctx context.Context, args []string, env *Env) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	noWait := fs.Bool("no-wait", false, "return once the call is accepted")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 2, "a sandbox ID and a checkpoint ID"); err != nil {
		return err
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	op, err := c.RestoreSandbox(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	return finishOp(ctx, c, env, op, *noWait, *asJSON)
}

// checkpointCmd runs `space checkpoint create|list|get|delete`.
func checkpointCmd(ctx context.Context, verb string, args []string, env *Env) error {
	fs := flag.NewFlagSet("checkpoint "+verb, flag.ContinueOnError)
	name := fs.String("name", "", "checkpoint name (create)")
	noWait := fs.Bool("no-wait", false, "return once the checkpoint is accepted (create)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parse(fs, args)
	if err != nil {
		return err
	}
	what := map[string]string{"create": "a sandbox ID", "list": "a sandbox ID", "get": "a checkpoint ID", "delete": "a checkpoint ID"}[verb]
	if err := wantArgs(pos, 1, what); err != nil {
		return err
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	switch verb {
	case "create":
		res, err := c.CreateCheckpoint(ctx, pos[0], *name)
		if err != nil {
			return err
		}
		if err := finishOp(ctx, c, &Env{Stdout: io.Discard, Stderr: env.Stderr}, &res.Operation, *noWait, false); err != nil {
			return err
		}
		ck, err := c.GetCheckpoint(ctx, res.Checkpoint.ID)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.Stdout, ck)
		}
		fmt.Fprintln(env.Stdout, ck.ID)
	case "list":
		l, err := c.ListCheckpoints(ctx, pos[0], client.Page{Size: 1000})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.Stdout, l)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSTATE\tSIZE\tPARENT\tCREATED")
		for _, ck := range l.Checkpoints {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", ck.ID, ck.Name, ck.State, ck.SizeBytes, ck.Parent, ck.CreatedAt.Format("2006-01-02T15:04:05Z"))
		}
		return tw.Flush()
	case "get":
		ck, err := c.GetCheckpoint(ctx, pos[0])
		if err != nil {
			return err
		}
		return printJSON(env.Stdout, ck)
	case "delete":
		return c.DeleteCheckpoint(ctx, pos[0])
	}
	return nil
}
