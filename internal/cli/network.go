package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// networkOpts are `space sandbox network set`'s flags: the policy either
// whole from a file or built from the flags.
type networkOpts struct {
	file, deflt      string
	allow, deny, inj strList
}

// networkSet is `space sandbox network set ID`: it replaces the policy.
func networkSet(env *Env) *cobra.Command {
	o := &networkOpts{}
	return command(env, "sandbox network set", func(fs *pflag.FlagSet) {
		fs.StringVar(&o.file, "file", "", "the whole network object as JSON ({egress: {default, allow, deny}, inject: [...]}); - is stdin")
		fs.StringVar(&o.deflt, "default", "deny", "what egress the rules do not name gets: deny or allow")
		fs.Var(&o.allow, "allow", "domain (pypi.org, *.github.com) or CIDR the sandbox may reach (repeatable)")
		fs.Var(&o.deny, "deny", "domain or CIDR the sandbox may not reach (repeatable)")
		fs.Var(&o.inj, "inject", "DOMAIN:HEADER=VALUE the egress proxy sets on requests to DOMAIN; VALUE may name ${secret:NAME} (repeatable)")
	}, func(ctx context.Context, cl *call) error {
		policy, err := o.policy(env.Stdin)
		if err != nil {
			return err
		}
		c, err := env.client()
		if err != nil {
			return err
		}
		sb, err := c.SetNetwork(ctx, cl.pos[0], policy)
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, sb)
		}
		fmt.Fprintf(env.Stdout, "%s %s\n", sb.ID, sb.Network)
		return nil
	})
}

// policy is the network object the flags say.
func (o *networkOpts) policy(stdin io.Reader) (json.RawMessage, error) {
	if o.file != "" {
		if len(o.allow)+len(o.deny)+len(o.inj) > 0 || o.deflt != "deny" {
			return nil, usagef("--file gives the whole policy: leave out --default, --allow, --deny and --inject")
		}
		in := stdin
		if o.file != "-" {
			f, err := os.Open(o.file)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			in = f
		}
		b, err := io.ReadAll(io.LimitReader(in, 1<<20))
		if err != nil {
			return nil, err
		}
		if !json.Valid(b) {
			return nil, usagef("--file %s is not JSON", o.file)
		}
		return b, nil // the server validates the policy
	}
	if o.deflt != "deny" && o.deflt != "allow" {
		return nil, usagef("--default must be deny or allow, not %q", o.deflt)
	}
	type rule struct {
		Domain string `json:"domain"`
		Header string `json:"header"`
		Value  string `json:"value"`
	}
	var p struct {
		Egress struct {
			Default string   `json:"default"`
			Allow   []string `json:"allow,omitempty"`
			Deny    []string `json:"deny,omitempty"`
		} `json:"egress"`
		Inject []rule `json:"inject,omitempty"`
	}
	p.Egress.Default, p.Egress.Allow, p.Egress.Deny = o.deflt, o.allow, o.deny
	for _, v := range o.inj {
		domain, hv, ok1 := strings.Cut(v, ":")
		header, value, ok2 := strings.Cut(hv, "=")
		if !ok1 || !ok2 || domain == "" || header == "" {
			return nil, usagef("--inject: want DOMAIN:HEADER=VALUE, got %q", v)
		}
		p.Inject = append(p.Inject, rule{Domain: domain, Header: header, Value: value})
	}
	return json.Marshal(p)
}

// networkLog is `space sandbox network log ID`.
func networkLog(env *Env) *cobra.Command {
	return command(env, "sandbox network log", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		l, err := c.NetworkLog(ctx, cl.pos[0])
		if err != nil {
			return err
		}
		if cl.json {
			return printJSON(env.Stdout, l)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tKIND\tDESTINATION\tALLOWED\tRULE\tOUT\tIN")
		for _, r := range l.Records {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%d\t%d\n", r.Time.Local().Format(time.DateTime), r.Kind, r.Destination,
				r.Allowed, r.Rule, r.BytesOut, r.BytesIn)
		}
		return tw.Flush()
	})
}
