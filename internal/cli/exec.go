package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
)

var signalNumbers = map[string]int{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGBUS": 7, "SIGFPE": 8,
	"SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15,
}

// exitCode maps a command's exit event to a local exit status the way a
// shell does (128+n for a signal).
func exitCode(ev apiv1.Event) int {
	if ev.ExitCode != nil {
		return *ev.ExitCode
	}
	if ev.Signal != nil {
		if n, ok := signalNumbers[*ev.Signal]; ok {
			return 128 + n
		}
	}
	return 255
}

// execOpts are exec's own flags.
type execOpts struct {
	tty, interactive bool
	cwd, shell       string
	timeout          int
	env              kv
}

func execCmd(env *Env) *cobra.Command {
	o := execOpts{env: kv{}}
	return command(env, "exec", func(fs *pflag.FlagSet) {
		fs.BoolVarP(&o.tty, "tty", "t", false, "run in a PTY and make the local terminal raw (interactive)")
		fs.BoolVarP(&o.interactive, "interactive", "i", false, "forward local stdin to the command")
		fs.StringVar(&o.cwd, "cwd", "", "working directory in the sandbox")
		fs.StringVar(&o.shell, "shell", "", "run this /bin/sh -c script instead of ARGV")
		fs.IntVar(&o.timeout, "timeout", 0, "kill the command after SECONDS")
		fs.Var(o.env, "env", "environment (repeatable)")
	}, func(ctx context.Context, cl *call) error { return execute(ctx, env, cl, o) })
}

func execute(ctx context.Context, env *Env, cl *call, o execOpts) error {
	if len(cl.rest) == 0 && o.shell == "" {
		return usagef("want exec ID -- ARGV... (or --shell SCRIPT)")
	}
	req := apiv1.CreateCommandRequest{Argv: cl.rest, Shell: o.shell, Cwd: o.cwd, TimeoutSeconds: o.timeout, Stdin: o.interactive || o.tty}
	if len(o.env) > 0 {
		req.Env = o.env
	}
	inFile, _ := env.Stdin.(*os.File)
	outFile, _ := env.Stdout.(*os.File)
	if o.tty {
		if inFile == nil || !term.IsTerminal(int(inFile.Fd())) {
			return usagef("-t needs a terminal on stdin")
		}
		req.PTY = &apiv1.PTY{Rows: 24, Cols: 80}
		if outFile != nil {
			if w, h, err := term.GetSize(int(outFile.Fd())); err == nil {
				req.PTY = &apiv1.PTY{Rows: h, Cols: w}
			}
		}
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	sbx := cl.pos[0]
	cmd, err := c.CreateCommand(ctx, sbx, req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.tty {
		old, err := term.MakeRaw(int(inFile.Fd()))
		if err != nil {
			return fmt.Errorf("raw terminal: %v: %w", err, errdefs.ErrFailedPrecondition)
		}
		defer term.Restore(int(inFile.Fd()), old)
		go forwardResize(ctx, c, sbx, cmd.ID, outFile)
	}
	if req.Stdin {
		go forwardStdin(ctx, c, sbx, cmd.ID, env.Stdin, env.Stderr)
	}
	ev, err := follow(ctx, c, sbx, cmd.ID, env, cl.json)
	if err != nil {
		return err
	}
	if ev.Reason == "lost" || ev.Reason == "sandbox_deleted" || ev.Reason == "timeout" || ev.Reason == "oom" {
		fmt.Fprintf(env.Stderr, "\r\nspace: command ended: %s\r\n", ev.Reason)
	}
	if code := exitCode(ev); code != 0 {
		return exitError{code}
	}
	return nil
}

// follow streams the command's events to the local streams until its exit
// event, reattaching after a dropped connection without losing output.
func follow(ctx context.Context, c *client.Client, sbx, cid string, env *Env, asJSON bool) (apiv1.Event, error) {
	var after uint64
	failures := 0
	for {
		s, err := c.Events(ctx, sbx, cid, after)
		if err != nil {
			if errors.Is(err, errdefs.ErrUnavailable) && failures < 10 {
				failures++
				time.Sleep(time.Duration(failures) * 200 * time.Millisecond)
				continue
			}
			return apiv1.Event{}, err
		}
		for {
			ev, err := s.Next()
			if err != nil {
				after = s.Last
				s.Close()
				if errors.Is(err, io.EOF) || errors.Is(err, errdefs.ErrUnavailable) {
					break // reattach
				}
				return apiv1.Event{}, err
			}
			failures = 0
			if asJSON {
				printJSONLine(env.Stdout, ev)
			} else {
				switch ev.Type {
				case apiv1.EventStdout:
					env.Stdout.Write(ev.Bytes())
				case apiv1.EventStderr:
					env.Stderr.Write(ev.Bytes())
				case apiv1.EventGap:
					fmt.Fprintf(env.Stderr, "\r\nspace: %d bytes of output were lost\r\n", ev.LostBytes)
				}
			}
			if ev.Type == apiv1.EventExit {
				s.Close()
				return ev, nil
			}
		}
		if failures++; failures > 10 {
			return apiv1.Event{}, fmt.Errorf("event stream keeps ending without an exit: %w", errdefs.ErrUnavailable)
		}
	}
}

func printJSONLine(w io.Writer, v any) {
	b, _ := jsonMarshal(v)
	w.Write(append(b, '\n'))
}

func forwardStdin(ctx context.Context, c *client.Client, sbx, cid string, in io.Reader, stderr io.Writer) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if werr := c.Stdin(ctx, sbx, cid, bytesReader(buf[:n]), false); werr != nil {
				if ctx.Err() == nil && !errors.Is(werr, errdefs.ErrConflict) {
					fmt.Fprintf(stderr, "\r\nspace: stdin: %v\r\n", werr)
				}
				return
			}
		}
		if err != nil {
			c.Stdin(ctx, sbx, cid, nil, true)
			return
		}
	}
}

func forwardResize(ctx context.Context, c *client.Client, sbx, cid string, out *os.File) {
	if out == nil {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			if w, h, err := term.GetSize(int(out.Fd())); err == nil {
				c.Resize(ctx, sbx, cid, h, w)
			}
		}
	}
}
