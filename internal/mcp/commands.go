package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
)

// DefaultRunTimeout is the timeout_seconds run_command gives a command that
// names none: a tool call should not wait forever (start_command is for
// long work).
const DefaultRunTimeout = 300

// readWait is how long read_command_output waits for more output of a
// command that is still running.
const readWait = 5 * time.Second

// CommandArgs say what to run; exactly one of Command and Argv is set.
type CommandArgs struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"sandbox id (sbx_…)"`
	Command        string            `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c (give this or argv)"`
	Argv           []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell (give this or command)"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"absolute working directory in the sandbox"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"kill the command (its whole process group) after this many seconds"`
}

func (a CommandArgs) request(defaultTimeout int) (apiv1.CreateCommandRequest, error) {
	if err := needID("sandbox_id", a.SandboxID); err != nil {
		return apiv1.CreateCommandRequest{}, err
	}
	if (a.Command == "") == (len(a.Argv) == 0) {
		return apiv1.CreateCommandRequest{}, errors.New("invalid_argument: give exactly one of command (a shell string) and argv")
	}
	req := apiv1.CreateCommandRequest{Argv: a.Argv, Shell: a.Command, Cwd: a.Cwd, Env: a.Env, TimeoutSeconds: a.TimeoutSeconds}
	if req.TimeoutSeconds == 0 {
		req.TimeoutSeconds = defaultTimeout
	}
	return req, nil
}

// RunResult is run_command's result.
type RunResult struct {
	CommandID      string  `json:"command_id"`
	ExitCode       *int    `json:"exit_code,omitempty" jsonschema:"the exit status; absent when the command was killed by a signal"`
	Signal         *string `json:"signal,omitempty" jsonschema:"the signal that ended the command, e.g. SIGKILL"`
	Reason         string  `json:"reason" jsonschema:"exited, signaled, timeout, killed, oom, sandbox_deleted or lost"`
	Stdout         string  `json:"stdout" jsonschema:"standard output; when longer than the cap its middle is replaced by a marker saying how many bytes were cut"`
	Stderr         string  `json:"stderr" jsonschema:"standard error, capped like stdout"`
	StdoutCutBytes int64   `json:"stdout_cut_bytes" jsonschema:"bytes of stdout left out of this result"`
	StderrCutBytes int64   `json:"stderr_cut_bytes" jsonschema:"bytes of stderr left out of this result"`
	LostBytes      int64   `json:"lost_bytes,omitempty" jsonschema:"output the server's buffer dropped before it was read"`
}

// StartResult is start_command's result.
type StartResult struct {
	CommandID string `json:"command_id" jsonschema:"command id (cmd_…) for read_command_output"`
	SandboxID string `json:"sandbox_id"`
	PID       int    `json:"pid,omitempty"`
	State     string `json:"state" jsonschema:"running, or exited when it already ended"`
}

// ReadArgs are read_command_output's arguments.
type ReadArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox id (sbx_…)"`
	CommandID string `json:"command_id" jsonschema:"command id (cmd_…) from start_command"`
	After     uint64 `json:"after,omitempty" jsonschema:"read output after this event number: pass the previous result's next_after (0: from the start)"`
}

// ReadResult is read_command_output's result.
type ReadResult struct {
	Stdout    string  `json:"stdout" jsonschema:"standard output since after"`
	Stderr    string  `json:"stderr" jsonschema:"standard error since after"`
	NextAfter uint64  `json:"next_after" jsonschema:"pass as after to read what follows"`
	Exited    bool    `json:"exited" jsonschema:"the command has ended; exit_code, signal and reason say how"`
	More      bool    `json:"more" jsonschema:"more output is already waiting: call again with after=next_after"`
	ExitCode  *int    `json:"exit_code,omitempty"`
	Signal    *string `json:"signal,omitempty"`
	Reason    string  `json:"reason,omitempty"`
	LostBytes int64   `json:"lost_bytes,omitempty" jsonschema:"output the server's buffer dropped before it was read"`
}

func (s *Server) addCommandTools() {
	addTool(s, &mcpsdk.Tool{Name: "run_command",
		Description: fmt.Sprintf("Run a command in a sandbox to its end and return its exit code, stdout and stderr "+
			"(each capped at %d bytes: a marker in the text says how many bytes were cut). Give command (a shell "+
			"string) or argv. Without timeout_seconds the command is killed after %d seconds; use start_command for "+
			"longer work.", s.cfg.OutputCap, DefaultRunTimeout),
		Annotations: annotations("Run command", false, true, false, true)},
		func(ctx context.Context, c *client.Client, in CommandArgs) (RunResult, error) {
			req, err := in.request(DefaultRunTimeout)
			if err != nil {
				return RunResult{}, err
			}
			cmd, err := idempotent(ctx, func(o ...client.CallOption) (*apiv1.Command, error) {
				return c.CreateCommand(ctx, in.SandboxID, req, o...)
			})
			if err != nil {
				return RunResult{}, err
			}
			// The server ends the command at its timeout; the wait ends a
			// little later in case the sandbox cannot say so.
			ctx, cancel := context.WithTimeout(ctx, time.Duration(req.TimeoutSeconds)*time.Second+time.Minute)
			defer cancel()
			stdout, stderr := newCapture(s.cfg.OutputCap), newCapture(s.cfg.OutputCap)
			res := RunResult{CommandID: cmd.ID}
			exit, err := follow(ctx, c, in.SandboxID, cmd.ID, 0, func(ev apiv1.Event) bool {
				switch ev.Type {
				case apiv1.EventStdout:
					stdout.Write(ev.Bytes())
				case apiv1.EventStderr:
					stderr.Write(ev.Bytes())
				case apiv1.EventGap:
					res.LostBytes += ev.LostBytes
				}
				return false
			})
			if err != nil {
				return RunResult{}, fmt.Errorf("command %s: %w", cmd.ID, err)
			}
			res.ExitCode, res.Signal, res.Reason = exit.ExitCode, exit.Signal, exit.Reason
			res.Stdout, res.StdoutCutBytes = stdout.String()
			res.Stderr, res.StderrCutBytes = stderr.String()
			return res, nil
		})

	addTool(s, &mcpsdk.Tool{Name: "start_command",
		Description: "Start a long-running command in a sandbox and return at once with its command id; read its " +
			"output with read_command_output. Give command (a shell string) or argv. It runs until it ends or " +
			"timeout_seconds pass (no limit when not given).",
		Annotations: annotations("Start command", false, true, false, true)},
		func(ctx context.Context, c *client.Client, in CommandArgs) (StartResult, error) {
			req, err := in.request(0)
			if err != nil {
				return StartResult{}, err
			}
			cmd, err := idempotent(ctx, func(o ...client.CallOption) (*apiv1.Command, error) {
				return c.CreateCommand(ctx, in.SandboxID, req, o...)
			})
			if err != nil {
				return StartResult{}, err
			}
			// A command starts on the first attach to its events: attach,
			// see it start, and leave it running.
			res := StartResult{CommandID: cmd.ID, SandboxID: in.SandboxID, State: apiv1.CommandRunning}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			exit, err := follow(ctx, c, in.SandboxID, cmd.ID, 0, func(ev apiv1.Event) bool {
				if ev.Type == apiv1.EventStarted {
					res.PID = ev.PID
					return true
				}
				return false
			})
			if err != nil {
				return StartResult{}, fmt.Errorf("command %s: %w", cmd.ID, err)
			}
			if exit != nil {
				res.State = apiv1.CommandExited
			}
			return res, nil
		})

	addTool(s, &mcpsdk.Tool{Name: "read_command_output",
		Description: fmt.Sprintf("Read the output of a command started with start_command, from event number after "+
			"(0: from the start). Waits up to %d seconds for output of a running command; returns next_after for the "+
			"next read, and exit_code and reason once it exited. Returns at most about %d bytes per stream per call "+
			"(more: true then).", int(readWait/time.Second), s.cfg.OutputCap),
		Annotations: annotations("Read command output", true, false, true, false)},
		func(ctx context.Context, c *client.Client, in ReadArgs) (ReadResult, error) {
			if err := needID("sandbox_id", in.SandboxID); err != nil {
				return ReadResult{}, err
			}
			if err := needID("command_id", in.CommandID); err != nil {
				return ReadResult{}, err
			}
			return s.readOutput(ctx, c, in)
		})
}

func (s *Server) readOutput(ctx context.Context, c *client.Client, in ReadArgs) (ReadResult, error) {
	res := ReadResult{NextAfter: in.After}
	var stdout, stderr []byte
	st, err := c.Events(ctx, in.SandboxID, in.CommandID, in.After)
	if err != nil {
		return res, err
	}
	defer st.Close()
	// Stop reading when the wait is over; the stream is closed under Next.
	timer := time.AfterFunc(readWait, func() { st.Close() })
	defer timer.Stop()
	for {
		ev, err := st.Next()
		if err != nil {
			var ae *client.Error
			if errors.As(err, &ae) {
				return res, err
			}
			// The wait ended (or the connection dropped): what was read
			// stands, and next_after resumes after it.
			break
		}
		res.NextAfter = st.Last
		switch ev.Type {
		case apiv1.EventStdout:
			stdout = append(stdout, ev.Bytes()...)
		case apiv1.EventStderr:
			stderr = append(stderr, ev.Bytes()...)
		case apiv1.EventGap:
			res.LostBytes += ev.LostBytes
		case apiv1.EventExit:
			res.Exited, res.ExitCode, res.Signal, res.Reason = true, ev.ExitCode, ev.Signal, ev.Reason
		}
		if res.Exited {
			break
		}
		if len(stdout) >= s.cfg.OutputCap || len(stderr) >= s.cfg.OutputCap {
			res.More = true
			break
		}
	}
	res.Stdout, res.Stderr = text(stdout), text(stderr)
	return res, nil
}

// follow reads a command's events from after on, calling fn for each until
// it returns true or the exit event comes (returned). A dropped connection
// is reattached with after= the last event read, so nothing is lost.
func follow(ctx context.Context, c *client.Client, sandbox, cid string, after uint64, fn func(apiv1.Event) bool) (*apiv1.Event, error) {
	failures := 0
	for {
		st, err := c.Events(ctx, sandbox, cid, after)
		if err == nil {
			var ev apiv1.Event
			for {
				ev, err = st.Next()
				if err != nil {
					break
				}
				failures = 0
				if ev.Type == apiv1.EventExit {
					st.Close()
					return &ev, nil
				}
				if fn(ev) {
					st.Close()
					return nil, nil
				}
			}
			after = st.Last
			st.Close()
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no exit before the wait ended: %w", errdefs.ErrDeadlineExceeded)
		}
		var ae *client.Error
		if errors.As(err, &ae) && ae.Status != 200 {
			return nil, err // an answer, not a dropped connection
		}
		// A closed stream alone never says the command ended: reattach,
		// a few times in a row at most without a new event.
		failures++
		if failures > 5 {
			if errors.Is(err, io.EOF) || err == nil {
				err = fmt.Errorf("event stream keeps ending without an exit event: %w", errdefs.ErrUnavailable)
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(failures) * 500 * time.Millisecond):
		}
	}
}
