package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// tenantList is `space admin tenant list`.
func tenantList(env *Env) *cobra.Command {
	return command(env, "admin tenant list", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		l, err := c.Tenants(ctx)
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, l)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tID\tSANDBOXES\tQUOTA SANDBOXES\tQUOTA VCPUS\tQUOTA MEMORY\tCREATED")
		for _, t := range l.Tenants {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.Name, t.ID, t.Sandboxes, limit(t.Quotas.Sandboxes, ""),
				limit(t.Quotas.VCPUs, ""), limit(t.Quotas.MemoryMiB, "MiB"), t.CreatedAt.Format(time.RFC3339))
		}
		return tw.Flush()
	})
}

// limit shows a quota: 0 is unlimited.
func limit(n int, unit string) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n, unit)
}

// tenantQuota is `space admin tenant quota TENANT [--sandboxes N] [--vcpus N] [--memory-mib N]`.
func tenantQuota(env *Env) *cobra.Command {
	var fs *pflag.FlagSet
	var sandboxes, vcpus, memory int
	return command(env, "admin tenant quota", func(f *pflag.FlagSet) {
		fs = f
		f.IntVar(&sandboxes, "sandboxes", 0, "sandboxes at once (0: unlimited)")
		f.IntVar(&vcpus, "vcpus", 0, "vCPUs summed over the tenant's sandboxes (0: unlimited)")
		f.IntVar(&memory, "memory-mib", 0, "guest RAM in MiB summed over the tenant's sandboxes (0: unlimited)")
	}, func(ctx context.Context, cl *call) error {
		var req apiv1.SetQuotasRequest
		for _, f := range []struct {
			name string
			v    int
			dst  **int
		}{{"sandboxes", sandboxes, &req.Sandboxes}, {"vcpus", vcpus, &req.VCPUs}, {"memory-mib", memory, &req.MemoryMiB}} {
			if fs.Changed(f.name) {
				if f.v < 0 {
					return usagef("--%s must be 0 (unlimited) or more, not %d", f.name, f.v)
				}
				*f.dst = new(f.v)
			}
		}
		if req == (apiv1.SetQuotasRequest{}) {
			return usagef("give at least one of --sandboxes, --vcpus and --memory-mib")
		}
		c, err := env.client()
		if err != nil {
			return err
		}
		t, err := c.SetQuotas(ctx, cl.pos[0], req)
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, t)
		}
		fmt.Fprintf(env.Stdout, "%s: sandboxes %s, vcpus %s, memory %s\n", t.Name, limit(t.Quotas.Sandboxes, ""),
			limit(t.Quotas.VCPUs, ""), limit(t.Quotas.MemoryMiB, "MiB"))
		return nil
	})
}

// keyList is `space admin key list TENANT`: ids and formats, never a key.
func keyList(env *Env) *cobra.Command {
	return command(env, "admin key list", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		l, err := c.Keys(ctx, cl.pos[0])
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, l)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tFORMAT\tADMIN\tCREATED\tREVOKED")
		for _, k := range l.Keys {
			revoked := "-"
			if k.RevokedAt != nil {
				revoked = k.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\n", k.ID, k.Format, k.Admin, k.CreatedAt.Format(time.RFC3339), revoked)
		}
		return tw.Flush()
	})
}
