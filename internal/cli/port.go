package cli

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/space-sandbox/space/internal/client"
)

// portList is `space port list ID`: what listens inside the sandbox.
func portList(env *Env) *cobra.Command {
	return command(env, "port list", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		l, err := c.ListPorts(ctx, cl.pos[0])
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, l)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PORT\tADDRESS\tPROTOCOL")
		for _, p := range l.Ports {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", p.Port, p.Address, p.Protocol)
		}
		return tw.Flush()
	})
}

// portURL is `space port url ID PORT`: a preview URL of the port.
func portURL(env *Env) *cobra.Command {
	var public bool
	var ttl time.Duration
	return command(env, "port url", func(fs *pflag.FlagSet) {
		fs.BoolVar(&public, "public", false, "a URL anyone may open (default: private, it needs the printed token)")
		fs.DurationVar(&ttl, "ttl", 0, "how long the URL works, e.g. 30m or 24h (default: the server's, 1h)")
	}, func(ctx context.Context, cl *call) error {
		port, err := strconv.Atoi(cl.pos[1])
		if err != nil || port < 1 || port > 65535 {
			return usagef("PORT must be a number from 1 to 65535, not %q", cl.pos[1])
		}
		if ttl < 0 {
			return usagef("--ttl must be positive, not %s", ttl)
		}
		c, err := env.client()
		if err != nil {
			return err
		}
		u, err := c.CreatePortURL(ctx, cl.pos[0], port, public, ttl)
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, u)
		}
		// The URL alone on the first line, so $(space port url … | head -1) works.
		fmt.Fprintln(env.Stdout, u.URL)
		if u.Token != "" {
			fmt.Fprintf(env.Stdout, "token: %s (send it as %s, or open %s once)\n", u.Token, client.PortTokenHeader, client.BrowserURL(u))
		}
		fmt.Fprintf(env.Stdout, "expires: %s\n", u.ExpiresAt.Local().Format(time.DateTime))
		return nil
	})
}
