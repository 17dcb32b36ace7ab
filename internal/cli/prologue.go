package cli

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// prologue is how a command begins: its help, the flags most commands
// share (--json, --no-wait) and the positional arguments it takes. The
// table below holds every command's; command builds one from it, so a
// command's code begins with its own work.
type prologue struct {
	// use is what follows the command's name in its usage line.
	use string
	// short is the one line the group's help lists.
	short string
	// aliases are other names of the command.
	aliases []string
	// args is the number of positional arguments the command takes; -1
	// when the command checks them itself.
	args int
	// want says what they are, for the usage error.
	want string
	// noWait is the help of --no-wait ("": no such flag).
	noWait string
	// json is the help of --json ("": "print JSON"; "-": no such flag).
	json string
	// jsonOn makes --json default to true (the command prints only JSON).
	jsonOn bool
}

const (
	noArgs      = "no positional arguments"
	aSandbox    = "a sandbox ID"
	aCheckpoint = "a checkpoint ID"
	accepted    = "return once the call is accepted"
)

var (
	ls = []string{"ls"}
	rm = []string{"rm"}
)

// prologues are the commands' prologues by command path (without "space").
var prologues = map[string]prologue{
	"sandbox create": {use: "[flags]", short: "Create a sandbox and wait until it runs", want: noArgs,
		noWait: "return once the creation is accepted"},
	"sandbox list":    {use: "[flags]", short: "List sandboxes", aliases: ls, want: noArgs},
	"sandbox get":     {use: "ID", short: "Show a sandbox", args: 1, want: aSandbox},
	"sandbox delete":  {use: "ID", short: "Delete a sandbox", aliases: rm, args: 1, want: aSandbox, noWait: "return once the deletion is accepted"},
	"sandbox pause":   {use: "ID", short: "Pause a running sandbox (memory stays resident)", args: 1, want: aSandbox, noWait: accepted},
	"sandbox suspend": {use: "ID", short: "Suspend a sandbox to a snapshot and release its VM", args: 1, want: aSandbox, noWait: accepted},
	"sandbox wake":    {use: "ID", short: "Wake a paused or suspended sandbox", args: 1, want: aSandbox, noWait: accepted},
	"sandbox keep":    {use: "ID SECONDS", short: "Set a sandbox's time to live from now", args: 2, want: "a sandbox ID and a number of seconds"},
	"sandbox network set": {use: "ID [flags]", short: "Replace a sandbox's egress policy", args: 1, want: aSandbox,
		json: "print the sandbox as JSON"},
	"sandbox network log": {use: "ID", short: "Show a sandbox's egress audit records (feature network_log)", args: 1, want: aSandbox},
	"restore": {use: "ID CHECKPOINT", short: "Roll a sandbox back in place to a checkpoint", args: 2,
		want: "a sandbox ID and a checkpoint ID", noWait: accepted},
	"checkpoint create": {use: "ID [--name NAME]", short: "Checkpoint a running or paused sandbox", args: 1, want: aSandbox,
		noWait: "return once the checkpoint is accepted"},
	"checkpoint list":   {use: "ID", short: "List a sandbox's checkpoints", aliases: ls, args: 1, want: aSandbox},
	"checkpoint get":    {use: "CHECKPOINT", short: "Show a checkpoint (JSON)", args: 1, want: aCheckpoint},
	"checkpoint delete": {use: "CHECKPOINT", short: "Delete a checkpoint", aliases: rm, args: 1, want: aCheckpoint},
	"exec": {use: "[flags] ID -- ARGV...", short: "Run a command in a sandbox with the local streams attached",
		args: 1, want: "exec ID -- ARGV...", json: "print the API events as NDJSON"},
	"files put": {use: "ID LOCAL REMOTE", short: "Upload a file or a directory (LOCAL - is stdin)", args: 3, want: "files put ID LOCAL REMOTE"},
	"files get": {use: "ID REMOTE [LOCAL]", short: "Download a file (to stdout without LOCAL)", args: -1,
		json: "accepted for uniformity; file contents are raw"},
	"files ls": {use: "ID PATH", short: "List a directory", aliases: []string{"list"}, args: 2, want: "files ls ID PATH"},
	"template build": {use: "NAME (--from-oci PATH | --image REF | --from-rootfs PATH | --debian SUITE | --recipe FILE) [flags]",
		short: "Build a template and follow its log", args: -1, noWait: "return once the build is accepted",
		json: "print the built template as JSON"},
	"template list": {use: "", short: "List templates", aliases: ls, want: noArgs},
	"template get": {use: "NAME[@sha256:DIGEST]", short: "Show a template (JSON)", args: 1,
		want: "template get NAME[@sha256:DIGEST]", json: "print JSON (always)", jsonOn: true},
	"template delete": {use: "NAME[@sha256:DIGEST]", short: "Delete a template or one build of it", aliases: rm, args: 1,
		want: "template delete NAME[@sha256:DIGEST]", json: "accepted for symmetry; prints nothing"},
	"port list": {use: "ID", short: "List the TCP ports listening inside a sandbox", aliases: ls, args: 1, want: aSandbox},
	"port url": {use: "ID PORT [--public] [--ttl DURATION]", short: "Make a preview URL of a sandbox's port (private unless --public)",
		args: 2, want: "a sandbox ID and a port"},
	"op get":  {use: "ID", short: "Show an operation", args: 1, want: "an operation ID"},
	"op wait": {use: "ID", short: "Wait for an operation to end (exit 1 unless it succeeded)", args: 1, want: "an operation ID"},
	"secret set": {use: "NAME [--from-file FILE]", short: "Store a secret, its value read from stdin or a file (never an argument)",
		aliases: []string{"put"}, args: 1, want: "a secret name"},
	"secret list":         {use: "", short: "List secrets: names and timestamps, never values", aliases: ls, want: noArgs},
	"secret delete":       {use: "NAME", short: "Delete a secret", aliases: rm, args: 1, want: "a secret name"},
	"admin tenant create": {use: "NAME", short: "Create a tenant", args: 1, want: "a tenant name"},
	"admin key create": {use: "TENANT [--admin] [--format space|e2b]", short: "Create an API key for a tenant (shown only once)",
		args: 1, want: "a tenant name"},
	"admin tenant list": {use: "", short: "List tenants with their quotas and live sandbox counts", aliases: ls, want: noArgs},
	"admin tenant quota": {use: "TENANT [--sandboxes N] [--vcpus N] [--memory-mib N]", short: "Set a tenant's quotas (0: unlimited; the others stay)",
		args: 1, want: "a tenant name"},
	"admin key list":   {use: "TENANT", short: "List a tenant's API keys: ids and formats, never the keys", aliases: ls, args: 1, want: "a tenant name"},
	"admin key delete": {use: "KEY_ID", short: "Revoke an API key", aliases: []string{"rm", "revoke"}, args: 1, want: "a key ID"},
	"admin workers":    {use: "", short: "List workers", want: noArgs},
	"mcp": {use: "[--http ADDR]", short: "Serve SPACE's tools to an MCP client (stdio, or streamable HTTP)",
		want: "mcp [--http ADDR]", json: "-"},
	"version": {use: "[--client]", short: "Print the versions of this client and of the server", want: noArgs},
}

// call is a parsed command line: its positional arguments, what follows
// "--", and the shared flags.
type call struct {
	pos, rest    []string
	json, noWait bool
}

// command builds the command of path name (a key of prologues): its
// prologue's flags, then the command's own (flags, when set), and run
// with the parsed call.
func command(env *Env, name string, flags func(fs *pflag.FlagSet), run func(ctx context.Context, cl *call) error) *cobra.Command {
	p, ok := prologues[name]
	if !ok {
		panic("cli: no prologue for " + name) // names are constants of this package
	}
	words := strings.Fields(name)
	cl := &call{}
	cmd := &cobra.Command{
		Use:     strings.TrimSpace(words[len(words)-1] + " " + p.use),
		Short:   p.short,
		Aliases: p.aliases,
		Args: func(cmd *cobra.Command, args []string) error {
			cl.pos, cl.rest = args, nil
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				cl.pos, cl.rest = args[:dash], append([]string{}, args[dash:]...)
			}
			if p.args >= 0 && len(cl.pos) != p.args {
				return usagef("want %s", p.want)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if env.parsed != nil {
				env.parsed(name, cl)
				return nil
			}
			return run(cmd.Context(), cl)
		},
	}
	cmd.DisableFlagsInUseLine = strings.Contains(p.use, "[flags]") || strings.Contains(p.use, "--")
	fs := cmd.Flags()
	switch p.json {
	case "-":
	case "":
		fs.BoolVar(&cl.json, "json", p.jsonOn, "print JSON")
	default:
		fs.BoolVar(&cl.json, "json", p.jsonOn, p.json)
	}
	if p.noWait != "" {
		fs.BoolVar(&cl.noWait, "no-wait", false, p.noWait)
	}
	if flags != nil {
		flags(fs)
	}
	return cmd
}
