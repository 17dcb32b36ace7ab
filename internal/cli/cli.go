// Package cli is the `space` command line: thin commands over
// internal/client. It owns argument parsing and output formatting (human
// tables or --json) and nothing else; main only calls Run.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
)

// Env is what a command runs with; tests replace the streams.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Client is created from SPACE_URL and SPACE_API_KEY when nil.
	Client *client.Client
}

const usage = `space — command line of SPACE (Sandboxed Platform for Agentic Code Execution)

Environment: SPACE_URL (default http://127.0.0.1:8080), SPACE_API_KEY.
Every command accepts --json.

  space sandbox create [--template base] [--vcpus N] [--memory-mib N] [--disk-mib N]
                       [--env K=V]... [--metadata K=V]... [--timeout SECONDS] [--no-wait]
  space sandbox list [--state S] [--metadata K=V]...
  space sandbox get ID
  space sandbox delete ID [--no-wait]
  space sandbox pause|suspend|wake ID [--no-wait]
  space sandbox keep ID SECONDS
  space checkpoint create ID [--name NAME] [--no-wait]
  space checkpoint list ID
  space checkpoint get|delete CHECKPOINT
  space restore ID CHECKPOINT [--no-wait]
  space exec [-t] [-i] [--cwd DIR] [--env K=V]... [--timeout SECONDS] ID -- ARGV...
  space files put ID LOCAL REMOTE [--mode 0644]
  space files get ID REMOTE [LOCAL]
  space files ls ID PATH
  space template build NAME (--from-oci PATH | --image REF | --from-rootfs PATH |
                       --debian SUITE [--package P]... [--script FILE] | --recipe FILE)
                       [--vcpus N] [--memory-mib N] [--disk-mib N] [--env K=V]...
                       [--workdir DIR] [--user U] [--no-cache] [--no-wait]
  space template list
  space template get NAME[@sha256:DIGEST]
  space template delete NAME[@sha256:DIGEST] [--force]
  space op get ID
  space op wait ID
  space admin tenant create NAME
  space admin key create TENANT [--admin]
  space admin key delete KEY_ID
  space mcp [--http ADDR]   serve SPACE's tools to an MCP client (stdio, or
                            streamable HTTP with a SPACE key as bearer token)
`

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
	err := dispatch(ctx, args, &env)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, flag.ErrHelp):
		return 2
	}
	fmt.Fprintln(env.Stderr, "space:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg + " (see space help)" }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

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

func dispatch(ctx context.Context, args []string, env *Env) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(env.Stdout, usage)
		return nil
	}
	sub := func(n int) string {
		if len(args) > n {
			return args[n]
		}
		return ""
	}
	switch args[0] + " " + sub(1) {
	case "sandbox create":
		return sandboxCreate(ctx, args[2:], env)
	case "sandbox list", "sandbox ls":
		return sandboxList(ctx, args[2:], env)
	case "sandbox get":
		return sandboxGet(ctx, args[2:], env)
	case "sandbox delete", "sandbox rm":
		return sandboxDelete(ctx, args[2:], env)
	case "sandbox pause", "sandbox suspend", "sandbox wake":
		return sandboxLifecycle(ctx, args[1], args[2:], env)
	case "sandbox keep":
		return sandboxKeep(ctx, args[2:], env)
	case "checkpoint create", "checkpoint list", "checkpoint get", "checkpoint delete":
		return checkpointCmd(ctx, args[1], args[2:], env)
	case "checkpoint ls":
		return checkpointCmd(ctx, "list", args[2:], env)
	case "checkpoint rm":
		return checkpointCmd(ctx, "delete", args[2:], env)
	case "restore " + sub(1):
		return restore(ctx, args[1:], env)
	case "files put":
		return filesPut(ctx, args[2:], env)
	case "files get":
		return filesGet(ctx, args[2:], env)
	case "files ls", "files list":
		return filesLs(ctx, args[2:], env)
	case "template build":
		return templateBuild(ctx, args[2:], env)
	case "template list", "template ls":
		return templateList(ctx, args[2:], env)
	case "template get":
		return templateGet(ctx, args[2:], env)
	case "template delete", "template rm":
		return templateDelete(ctx, args[2:], env)
	case "op get":
		return opGet(ctx, args[2:], env, false)
	case "op wait":
		return opGet(ctx, args[2:], env, true)
	}
	switch args[0] {
	case "exec":
		return execCmd(ctx, args[1:], env)
	case "admin":
		return admin(ctx, args[1:], env)
	case "mcp":
		return mcpCmd(ctx, args[1:], env)
	}
	return usagef("unknown command %q", strings.Join(args[:min(len(args), 2)], " "))
}

// parse parses flags that may stand anywhere among the positional
// arguments; everything after "--" is returned separately, untouched.
func parse(fs *flag.FlagSet, args []string) (pos, rest []string, err error) {
	fs.SetOutput(io.Discard)
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			if rest == nil {
				rest = []string{}
			}
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, usagef("%s: %v", fs.Name(), err)
		}
		if fs.NArg() == 0 {
			return pos, rest, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// kv is a repeatable K=V flag.
type kv map[string]string

func (m kv) String() string { return "" }
func (m kv) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	m[k] = v
	return nil
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

func wantArgs(pos []string, n int, what string) error {
	if len(pos) != n {
		return usagef("want %s", what)
	}
	return nil
}
