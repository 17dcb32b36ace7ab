package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
)

// maxSecretBytes bounds a secret's value read from stdin or a file; the
// server applies its own bound.
const maxSecretBytes = 64 << 10

// secretSet is `space secret set NAME`: the value is read from stdin or
// --from-file, never from the command line, where other users of the
// host (ps) and the shell's history would see it.
func secretSet(env *Env) *cobra.Command {
	var file string
	return command(env, "secret set", func(fs *pflag.FlagSet) {
		fs.StringVar(&file, "from-file", "", "read the value from FILE (default: stdin; one trailing newline is dropped)")
	}, func(ctx context.Context, cl *call) error {
		in := env.Stdin
		if file != "" && file != "-" {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		b, err := io.ReadAll(io.LimitReader(in, maxSecretBytes+1))
		if err != nil {
			return err
		}
		if len(b) > maxSecretBytes {
			return usagef("the secret's value is over %d bytes", maxSecretBytes)
		}
		b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
		c, err := env.client()
		if err != nil {
			return err
		}
		s, err := c.PutSecret(ctx, cl.pos[0], string(b))
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, s)
		}
		fmt.Fprintln(env.Stdout, s.Name)
		return nil
	})
}

// secretList is `space secret list`.
func secretList(env *Env) *cobra.Command {
	return command(env, "secret list", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		all, err := allPages(func(token string) ([]apiv1.Secret, string, error) {
			l, err := c.ListSecrets(ctx, client.Page{Size: 1000, Token: token})
			if err != nil {
				return nil, "", err
			}
			return l.Secrets, l.NextPageToken, nil
		})
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, all)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCREATED\tUPDATED")
		for _, s := range all {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.CreatedAt.Local().Format(time.DateTime), s.UpdatedAt.Local().Format(time.DateTime))
		}
		return tw.Flush()
	})
}

// secretDelete is `space secret delete NAME`.
func secretDelete(env *Env) *cobra.Command {
	return command(env, "secret delete", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		return c.DeleteSecret(ctx, cl.pos[0])
	})
}
