package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/version"
)

// versionCmd is `space version`: this client's build and, unless
// --client, the server's (GET /v1/version, which needs no key), as
// kubectl version prints both.
func versionCmd(env *Env) *cobra.Command {
	var clientOnly bool
	return command(env, "version", func(fs *pflag.FlagSet) {
		fs.BoolVar(&clientOnly, "client", false, "print only this client's version (no call to the server)")
	}, func(ctx context.Context, cl *call) error {
		v := version.Get()
		mine := apiv1.Version{Version: v.Version, Commit: v.Commit, GoVersion: v.GoVersion, API: v.API}
		var server *apiv1.Version
		var serverErr error
		if !clientOnly {
			c := env.Client
			if c == nil {
				c, serverErr = client.FromEnv() // no key needed
			}
			if serverErr == nil {
				server, serverErr = c.Version(ctx)
			}
		}
		if cl.json {
			printJSON(env.Stdout, struct {
				Client apiv1.Version  `json:"client"`
				Server *apiv1.Version `json:"server,omitempty"`
			}{mine, server})
		} else {
			fmt.Fprintln(env.Stdout, "client:", v)
			if server != nil {
				fmt.Fprintln(env.Stdout, "server:", version.Info{Version: server.Version, Commit: server.Commit,
					GoVersion: server.GoVersion, API: server.API})
			}
		}
		if serverErr != nil {
			return fmt.Errorf("server version: %w", serverErr)
		}
		return nil
	})
}
