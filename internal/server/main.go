package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"

	"github.com/space-sandbox/space/internal/version"
)

// usages are the heads of spaced's help, by mode ("" is the single node);
// the mode's flags follow.
var usages = map[string]string{
	"": `spaced — the SPACE server

Usage:
  spaced [flags]            a single node: the control plane and the worker in one process
  spaced control [flags]    one replica of a cluster's control plane: API, store, operations;
                            sandboxes placed by Kubernetes
  spaced worker [flags]     this host's worker behind the worker protocol, in a cluster
  spaced help [MODE]        this help, or a mode's
  spaced --version          print the version

Run 'spaced control --help' or 'spaced worker --help' for a mode's flags.

Flags of the single node:
`,
	"control": `spaced control — one replica of a cluster's control plane: the API, auth, operations and
the sandbox service, with no worker in process; sandboxes are placed by Kubernetes.

Usage:
  spaced control --store postgres://… --worker-token-file FILE --admin-key-file FILE [flags]

Flags:
`,
	"worker": `spaced worker — this host's worker behind the worker protocol: it runs the sandboxes'
VMs and registers the host with Kubernetes.

Usage:
  spaced worker [flags]

Flags:
`,
}

// Main runs spaced with args (without the program name) and returns its
// exit code: 0 after help or the version, 2 for a bad command line, 1 for
// a failure. Help and the version go to stdout, everything else to
// stderr; a mode runs until SIGINT or SIGTERM.
func Main(args []string, stdout, stderr io.Writer) int {
	mode := ""
	if len(args) > 0 && (args[0] == "worker" || args[0] == "control") {
		mode, args = args[0], args[1:]
	}
	name := strings.TrimSpace("spaced " + mode)
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "--version" || a == "-version" || (a == "version" && mode == ""):
			fmt.Fprintln(stdout, "spaced", version.Get())
			return 0
		case a == "help" && mode == "":
			topic := ""
			if len(args) > 1 {
				topic = args[1]
			}
			if _, ok := usages[topic]; !ok {
				fmt.Fprintf(stderr, "spaced: unknown help topic %q: the modes are control and worker\n", topic)
				return 2
			}
			return printHelp(stdout, topic)
		case mode == "" && !strings.HasPrefix(a, "-"):
			fmt.Fprintf(stderr, "%s: unknown command %q: the modes are control and worker\nRun 'spaced --help' for usage.\n", name, a)
			return 2
		}
	}
	var err error
	var cfg Config
	var fn func(ctx context.Context, log *slog.Logger) error
	switch mode {
	case "worker":
		var wc WorkerConfig
		wc, err = ParseWorkerFlags(args)
		cfg, fn = wc.Config, func(ctx context.Context, log *slog.Logger) error { return RunWorker(ctx, wc, log) }
	case "control":
		var cc ControlConfig
		cc, err = ParseControlFlags(args)
		cfg, fn = cc.Config, func(ctx context.Context, log *slog.Logger) error { return RunControl(ctx, cc, log) }
	default:
		cfg, err = ParseFlags(args)
		fn = func(ctx context.Context, log *slog.Logger) error { return Run(ctx, cfg, log) }
	}
	var help *helpError
	if errors.As(err, &help) {
		io.WriteString(stdout, usages[mode])
		io.WriteString(stdout, help.flags)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return 2
	}
	log := NewLogger(stderr, cfg)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := fn(ctx, log); err != nil {
		log.Error(name+" failed", "err", err)
		fmt.Fprintln(stderr, name+":", err)
		return 1
	}
	return 0
}

// printHelp writes a mode's help, its head and its flags, and returns 0.
func printHelp(w io.Writer, mode string) int {
	return Main(append(strings.Fields(mode), "--help"), w, io.Discard)
}

// helpError is what parsing -h or --help returns: the flags' help, for
// Main to print after the mode's head. It is a flag.ErrHelp.
type helpError struct{ flags string }

func (*helpError) Error() string        { return flag.ErrHelp.Error() }
func (*helpError) Is(target error) bool { return target == flag.ErrHelp }

// parseFlags parses a mode's flags without the flag package printing
// anything: a bad flag is an error for Main to print, and -h or --help a
// helpError carrying the flags' help.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return &helpError{flags: flagHelp(fs)}
	}
	return err
}

// flagHelp is the flag package's PrintDefaults with the flags spelled as
// the documentation spells them, --name.
func flagHelp(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  --%s", f.Name)
		if name != "" {
			b.WriteString(" " + name)
		}
		b.WriteString("\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch f.DefValue {
		case "", "0", "false", "0s", "[]":
		default:
			if g, ok := f.Value.(flag.Getter); ok && isString(g.Get()) {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %v)", f.DefValue)
			}
		}
		b.WriteString("\n")
	})
	return b.String()
}

func isString(v any) bool { _, ok := v.(string); return ok }
