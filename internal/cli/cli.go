// Package cli is the `space` command line: thin commands over
// internal/client. It owns argument parsing and output formatting (human
// tables or --json) and nothing else; main only calls Run.
//
// The command tree is spf13/cobra's, as kubectl's and gh's are: help,
// -h and --help work at every level (top, group, command) and exit 0 with
// the usage and the flags on stdout; an unknown command or flag exits 2
// with a hint on stderr; a failed call exits 1, and exec exits with the
// command's own status.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/version"
)

// Env is what a command runs with; tests replace the streams.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Client is created from SPACE_URL and SPACE_API_KEY when nil.
	Client *client.Client

	// parsed, when set, receives each command's parsed call instead of
	// the command running (the prologue test).
	parsed func(name string, cl *call)
}

const rootLong = `space — command line of SPACE (Sandboxed Platform for Agentic Code Execution)

Environment: SPACE_URL (default http://127.0.0.1:8080), SPACE_API_KEY.`

// exitError carries a process exit code through the command functions.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// Run runs the command line args (without the program name) and returns
// the process exit code.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Stdin == nil {
		env.Stdin = os.Stdin
	}
	if env.Stdout == nil {
		env.Stdout = os.Stdout
	}
	if env.Stderr == nil {
		env.Stderr = os.Stderr
	}
	root := newRoot(&env)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	var ue usageError
	if errors.As(err, &ue) {
		path := "space"
		if cmd != nil && cmd.Name() != "help" {
			path = cmd.CommandPath()
		}
		fmt.Fprintf(env.Stderr, "space: %v\nRun '%s --help' for usage.\n", err, path)
		return 2
	}
	fmt.Fprintln(env.Stderr, "space:", err)
	return 1
}

// usageError is a command line the commands do not take (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// newRoot is the command tree over env.
func newRoot(env *Env) *cobra.Command {
	root := &cobra.Command{
		Use:                   "space",
		Short:                 "command line of SPACE",
		Long:                  rootLong,
		Version:               version.Get().String(),
		SilenceErrors:         true,
		SilenceUsage:          true,
		Args:                  cobra.ArbitraryArgs, // groupRun says what is unknown
		DisableFlagsInUseLine: true,
		// A bare `space` prints the help, as before.
		RunE: func(cmd *cobra.Command, args []string) error { return groupRun(cmd, args) },
	}
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetVersionTemplate("space {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Args:  cobra.ArbitraryArgs,
		// cobra's own help command answers an unknown topic with the
		// top-level usage and exit 0; an unknown topic is a usage error.
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usagef("unknown help topic %q", strings.Join(args, " "))
			}
			cmd.InitDefaultHelpFlag() // as cobra's help command does: the flag is made on first use
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	})
	root.AddCommand(
		group("sandbox", "Create, list and manage sandboxes",
			sandboxCreate(env), sandboxList(env), sandboxGet(env), sandboxDelete(env),
			sandboxLifecycle(env, "pause"), sandboxLifecycle(env, "suspend"), sandboxLifecycle(env, "wake"),
			sandboxKeep(env), group("network", "Set and read a sandbox's egress policy", networkSet(env), networkLog(env))),
		group("checkpoint", "Checkpoint sandboxes and manage checkpoints",
			checkpointCmd(env, "create"), checkpointCmd(env, "list"), checkpointCmd(env, "get"), checkpointCmd(env, "delete")),
		restore(env),
		execCmd(env),
		group("files", "Move files in and out of a sandbox", filesPut(env), filesGet(env), filesLs(env)),
		group("template", "Build and manage templates", templateBuild(env), templateList(env), templateGet(env), templateDelete(env)),
		group("port", "Reach servers inside a sandbox: listening ports and preview URLs", portList(env), portURL(env)),
		group("op", "Read and wait for operations", opGet(env, false), opGet(env, true)),
		group("secret", "Store the tenant's secrets (write-only values)", secretSet(env), secretList(env), secretDelete(env)),
		group("admin", "Tenants, keys and workers (admin key)",
			group("tenant", "Create and list tenants and set their quotas", tenantCreate(env), tenantList(env), tenantQuota(env)),
			group("key", "Create, list and revoke API keys", keyCreate(env), keyList(env), keyDelete(env)),
			workersList(env)),
		mcpCmd(env),
		versionCmd(env),
	)
	return root
}

// group is a command of subcommands only.
func group(name, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: name, Short: short, Args: cobra.ArbitraryArgs, RunE: groupRun, DisableFlagsInUseLine: true}
	g.AddCommand(subs...)
	return g
}

// groupRun runs a group named alone (its help) or with a word that is
// none of its commands (a usage error with cobra's suggestions).
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	cmd.SuggestionsMinimumDistance = 2 // cobra's own default, set where it finds unknown commands
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{msg}
}

func (env *Env) client() (*client.Client, error) {
	if env.Client != nil {
		return env.Client, nil
	}
	c, err := client.FromEnv()
	if err != nil {
		return nil, err
	}
	if os.Getenv("SPACE_API_KEY") == "" {
		return nil, fmt.Errorf("SPACE_API_KEY is not set: %w", errdefs.ErrUnauthenticated)
	}
	env.Client = c
	return c, nil
}

// kv is a repeatable K=V flag.
type kv map[string]string

func (m kv) String() string { return "" }
func (m kv) Type() string   { return "K=V" }
func (m kv) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	m[k] = v
	return nil
}

// allPages asks fetch for pages (the first with an empty token) until one
// comes without a next token, and returns every item in order.
func allPages[T any](fetch func(token string) (items []T, next string, err error)) ([]T, error) {
	all := []T{}
	for token := ""; ; {
		items, next, err := fetch(token)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func sortedKV(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
