package cli

import "flag"

// prologue is how a command's flag set begins: the flags most commands
// share (--json, --no-wait) and the positional arguments it takes. The
// table below holds every command's; start runs one, so a command begins
// with its own work.
type prologue struct {
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
	ckAccepted  = "return once the checkpoint is accepted (create)"
)

// prologues are the commands' prologues by flag-set name.
var prologues = map[string]prologue{
	"sandbox create":    {want: noArgs, noWait: "return once the creation is accepted"},
	"sandbox list":      {want: noArgs},
	"sandbox get":       {args: 1, want: aSandbox},
	"sandbox delete":    {args: 1, want: aSandbox, noWait: "return once the deletion is accepted"},
	"sandbox pause":     {args: 1, want: aSandbox, noWait: accepted},
	"sandbox suspend":   {args: 1, want: aSandbox, noWait: accepted},
	"sandbox wake":      {args: 1, want: aSandbox, noWait: accepted},
	"sandbox keep":      {args: 2, want: "a sandbox ID and a number of seconds"},
	"restore":           {args: 2, want: "a sandbox ID and a checkpoint ID", noWait: accepted},
	"checkpoint create": {args: 1, want: aSandbox, noWait: ckAccepted},
	"checkpoint list":   {args: 1, want: aSandbox, noWait: ckAccepted},
	"checkpoint get":    {args: 1, want: aCheckpoint, noWait: ckAccepted},
	"checkpoint delete": {args: 1, want: aCheckpoint, noWait: ckAccepted},
	"exec":              {args: 1, want: "exec ID -- ARGV...", json: "print the API events as NDJSON"},
	"files put":         {args: 3, want: "files put ID LOCAL REMOTE"},
	"files get":         {args: -1, json: "accepted for uniformity; file contents are raw"},
	"files ls":          {args: 2, want: "files ls ID PATH"},
	"template build":    {args: -1, noWait: "return once the build is accepted", json: "print the built template as JSON"},
	"template list":     {want: noArgs},
	"template get":      {args: 1, want: "template get NAME[@sha256:DIGEST]", json: "print JSON (always)", jsonOn: true},
	"template delete":   {args: 1, want: "template delete NAME[@sha256:DIGEST]", json: "accepted for symmetry; prints nothing"},
	"op":                {args: 1, want: "an operation ID"},
	"mcp":               {want: "mcp [--http ADDR]", json: "-"},
}

// call is a parsed command line: its positional arguments, what follows
// "--", and the shared flags.
type call struct {
	pos, rest    []string
	json, noWait bool
}

// start parses args with the prologue of the command name (a key of
// prologues) plus the command's own flags, which flags (when set) defines.
func start(name string, args []string, flags func(fs *flag.FlagSet)) (*call, error) {
	p, ok := prologues[name]
	if !ok {
		panic("cli: no prologue for " + name) // names are constants of this package
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var json, noWait bool
	switch p.json {
	case "-":
	case "":
		fs.BoolVar(&json, "json", p.jsonOn, "print JSON")
	default:
		fs.BoolVar(&json, "json", p.jsonOn, p.json)
	}
	if p.noWait != "" {
		fs.BoolVar(&noWait, "no-wait", false, p.noWait)
	}
	if flags != nil {
		flags(fs)
	}
	pos, rest, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	if p.args >= 0 {
		if err := wantArgs(pos, p.args, p.want); err != nil {
			return nil, err
		}
	}
	return &call{pos: pos, rest: rest, json: json, noWait: noWait}, nil
}
