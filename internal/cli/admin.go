package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// tenantCreate is `space admin tenant create NAME`.
func tenantCreate(env *Env) *cobra.Command {
	return command(env, "admin tenant create", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		t, err := c.CreateTenant(ctx, cl.pos[0])
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, t)
		}
		fmt.Fprintln(env.Stdout, t.ID)
		return nil
	})
}

// keyCreate is `space admin key create TENANT [--admin] [--format space|e2b]`.
func keyCreate(env *Env) *cobra.Command {
	var admin bool
	var format string
	return command(env, "admin key create", func(fs *pflag.FlagSet) {
		fs.BoolVar(&admin, "admin", false, "make an admin key")
		fs.StringVar(&format, "format", "space", "key format: space (space_…), or e2b (e2b_<hex>, the form E2B's SDKs accept as E2B_API_KEY)")
	}, func(ctx context.Context, cl *call) error {
		if format != "space" && format != "e2b" {
			return usagef("--format must be space or e2b, not %q", format)
		}
		c, err := env.client()
		if err != nil {
			return err
		}
		k, err := c.CreateKeyFormat(ctx, cl.pos[0], admin, format)
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, k)
		}
		fmt.Fprintf(env.Stderr, "key %s for tenant %s (shown only now):\n", k.ID, k.Tenant)
		fmt.Fprintln(env.Stdout, k.Key)
		return nil
	})
}

// keyDelete is `space admin key delete KEY_ID`.
func keyDelete(env *Env) *cobra.Command {
	return command(env, "admin key delete", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		if err := c.DeleteKey(ctx, cl.pos[0]); err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, map[string]string{"id": cl.pos[0], "state": "revoked"})
		}
		fmt.Fprintln(env.Stdout, cl.pos[0], "revoked")
		return nil
	})
}

// workersList is `space admin workers`.
func workersList(env *Env) *cobra.Command {
	return command(env, "admin workers", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		l, err := c.Workers(ctx)
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, l)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSTATE\tVCPUS\tMEMORY\tSANDBOXES\tADDRESS")
		for _, w := range l.Workers {
			vcpus, mem, n := fmt.Sprint(w.Allocated.VCPUs), fmt.Sprintf("%dMiB", w.Allocated.MemoryMiB), fmt.Sprint(w.Allocated.Sandboxes)
			if w.Capacity != nil {
				vcpus += fmt.Sprintf("/%d", w.Capacity.VCPUs)
				mem += fmt.Sprintf("/%dMiB", w.Capacity.MemoryMiB)
				n += fmt.Sprintf("/%d", w.Capacity.Sandboxes)
			}
			addr := w.Address
			if addr == "" {
				addr = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.Name, w.State, vcpus, mem, n, addr)
		}
		return tw.Flush()
	})
}
