package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// Command deadlines the server keeps itself. The agent kills a command when
// its timeout_seconds pass, but a guest that cannot answer (a fork bomb
// starving it, a wedged VM, a dead link) must not keep a request, a stream
// or a command `running` for ever: every agent call a command request makes
// is bounded, and once a command's timeout plus DeadlineGrace passed without
// the agent reporting its exit, the server asks once more and, without an
// answer, ends the command itself: `timeout`, or `lost` when the agent is
// gone.

const (
	// DeadlineGrace is how long after its timeout a command may still take
	// to report its exit (the agent's own kill and the exit event's way
	// out) before the server decides. Under TCG a guest reaping hundreds of
	// killed processes takes seconds to report.
	DeadlineGrace = 10 * time.Second
	// AgentCallTimeout bounds one unary agent call made for a request.
	AgentCallTimeout = 30 * time.Second
	// RefreshBudget bounds the agent calls one read of commands makes to
	// refresh those still running: a wedged guest delays a listing by this
	// much at most, not by one call per command.
	RefreshBudget = 5 * time.Second
	// ProbeTimeout bounds the last question to the agent once a deadline
	// passed.
	ProbeTimeout = 5 * time.Second
)

// commandDeadline is when the server ends c itself unless the agent has
// reported its exit: its timeout after it started (the guest's start time,
// set from the host's clock at boot and restore), plus grace.
func commandDeadline(c *store.Command) (time.Time, bool) {
	if c.State == store.CommandExited {
		return time.Time{}, false // a replay: the exit is known
	}
	var spec agentproto.ProcessSpec
	if json.Unmarshal(c.Spec, &spec) != nil || spec.TimeoutSeconds <= 0 {
		return time.Time{}, false
	}
	start := c.CreatedAt
	if c.StartedAt != nil && c.StartedAt.After(start) {
		start = *c.StartedAt
	}
	return start.Add(time.Duration(spec.TimeoutSeconds)*time.Second + DeadlineGrace), true
}

// DeadlineTimer fires when c's deadline passes; without a timeout it never
// fires. Stop it with the returned func.
func DeadlineTimer(c *store.Command) (<-chan time.Time, func()) {
	d, ok := commandDeadline(c)
	if !ok {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(d))
	return t.C, func() { t.Stop() }
}

// WithDeadline bounds ctx by c's deadline, if it has one.
func WithDeadline(ctx context.Context, c *store.Command) (context.Context, context.CancelFunc) {
	if d, ok := commandDeadline(c); ok {
		return context.WithDeadline(ctx, d)
	}
	return context.WithCancel(ctx)
}

// overdue reports whether c's deadline has passed.
func Overdue(c *store.Command) bool {
	d, ok := commandDeadline(c)
	return ok && !time.Now().Before(d)
}

// boundedAgent bounds every unary call to the guest agent by
// AgentCallTimeout (streams and uploads are bounded by their callers).
type boundedAgent struct{ worker.Guest }

func Bounded(ag worker.Guest) worker.Guest {
	if ag == nil {
		return nil
	}
	if _, ok := ag.(boundedAgent); ok {
		return ag
	}
	return boundedAgent{ag}
}

func callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, AgentCallTimeout)
}

func (a boundedAgent) Start(ctx context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return a.Guest.Start(ctx, spec)
}

func (a boundedAgent) Stdin(ctx context.Context, id string, data []byte, eof bool) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return a.Guest.Stdin(ctx, id, data, eof)
}

func (a boundedAgent) Signal(ctx context.Context, id, signal string) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return a.Guest.Signal(ctx, id, signal)
}

func (a boundedAgent) Resize(ctx context.Context, id string, rows, cols uint16) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return a.Guest.Resize(ctx, id, rows, cols)
}

func (a boundedAgent) Get(ctx context.Context, id string) (agentproto.ProcessInfo, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return a.Guest.Get(ctx, id)
}

func (a boundedAgent) List(ctx context.Context) ([]agentproto.ProcessInfo, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return a.Guest.List(ctx)
}

// SettleOverdue is called when c's deadline passed and the agent has not
// reported its exit on the way the caller was waiting (lastSeq is the last
// event the caller delivered). It asks the agent once more, bounded. When
// the agent answers that the process exited, the exit is on its way and
// SettleOverdue returns false: keep reading. Otherwise it ends the command
// (a process the agent still runs past its timeout is killed) and returns
// the stored exit, which may be an exit another request recorded first.
func (s *Service) SettleOverdue(ctx context.Context, sb *store.Sandbox, c *store.Command, lastSeq uint64) (Exit, bool) {
	reason := agentproto.ReasonTimeout
	ag, err := s.Agent(ctx, sb.ID)
	if err != nil {
		reason = agentproto.ReasonLost
	} else {
		pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
		info, gerr := ag.Get(pctx, c.ProcessID)
		switch {
		case gerr == nil && info.Exit != nil:
			cancel()
			return Exit{}, false
		case gerr == nil:
			_ = ag.Signal(pctx, c.ProcessID, "SIGKILL")
		case errors.Is(gerr, errdefs.ErrUnavailable):
			reason = agentproto.ReasonLost // the link is gone, not slow
		}
		cancel()
		if gerr != nil {
			err = gerr
		}
	}
	log := s.logger.With("request_id", s.requestID(ctx), "sandbox", sb.ID, "command", c.ID, "reason", reason)
	if err != nil {
		log = log.With("err", CauseString(err))
	}
	log.Warn("command ended by the server: its deadline passed without an exit from the guest")
	now := time.Now().UTC()
	ex := Exit{Reason: reason, EndedAt: &now, Seq: lastSeq + 1}
	s.recordExit(ctx, c.ID, ex)
	if fresh, err := s.store.GetCommand(context.WithoutCancel(ctx), sb.TenantID, sb.ID, c.ID); err == nil {
		if stored, ok := DecodeExit(fresh); ok {
			return stored, true
		}
	}
	return ex, true
}

// SettleBroken ends c when err, from its event stream, says the guest
// broke that stream past what the host retries (errdefs.ErrDataLoss): the
// process is killed if the agent still answers, and the command ends
// "lost", the host's reason, since how it ended is no longer the guest's
// to say. It returns the stored exit (maybe one recorded first), or false
// for any other error.
func (s *Service) SettleBroken(ctx context.Context, sb *store.Sandbox, c *store.Command, lastSeq uint64, err error) (Exit, bool) {
	if errdefs.ClassOf(err) != errdefs.ErrDataLoss {
		return Exit{}, false
	}
	ctx = context.WithoutCancel(ctx)
	if ag, aerr := s.Agent(ctx, sb.ID); aerr == nil {
		pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
		_ = ag.Signal(pctx, c.ProcessID, "SIGKILL")
		cancel()
	}
	s.logger.Warn("command ended by the server: its guest kept breaking its event stream",
		"request_id", s.requestID(ctx), "sandbox", sb.ID, "command", c.ID, "err", CauseString(err))
	now := time.Now().UTC()
	ex := Exit{Reason: agentproto.ReasonLost, EndedAt: &now, Seq: lastSeq + 1}
	s.recordExit(ctx, c.ID, ex)
	if fresh, err := s.store.GetCommand(ctx, sb.TenantID, sb.ID, c.ID); err == nil {
		if stored, ok := DecodeExit(fresh); ok {
			return stored, true
		}
	}
	return ex, true
}

// OpenEvents opens c's event stream on ctx (which the stream keeps), but
// gives the opening itself no longer than one agent call or c's deadline:
// past that, cancel ends ctx and the open fails.
func OpenEvents(ctx context.Context, cancel context.CancelFunc, ag worker.Guest, c *store.Command, after uint64) (agentproto.EventStream, error) {
	limit := AgentCallTimeout
	if d, ok := commandDeadline(c); ok {
		limit = min(limit, max(time.Until(d), 0))
	}
	var settled atomic.Bool // set by the first of the open and the timer
	t := time.AfterFunc(limit, func() {
		if settled.CompareAndSwap(false, true) {
			cancel()
		}
	})
	defer t.Stop()
	st, err := ag.Events(ctx, c.ProcessID, after)
	if !settled.CompareAndSwap(false, true) {
		if err == nil {
			_ = st.Close()
		}
		return nil, errdefs.New(errdefs.ErrDeadlineExceeded, "the guest agent did not answer in time")
	}
	return st, err
}

// EndIfOverdue ends c when its deadline passed and a refresh could not
// learn its exit from the agent; otherwise it returns c as it is. It runs
// on its own probe bound, not the (maybe spent) budget of the refresh.
func (s *Service) EndIfOverdue(ctx context.Context, sb *store.Sandbox, c *store.Command) *store.Command {
	if c.State != store.CommandRunning || !Overdue(c) {
		return c
	}
	ctx = context.WithoutCancel(ctx)
	if _, ended := s.SettleOverdue(ctx, sb, c, 0); !ended {
		return c
	}
	if fresh, err := s.store.GetCommand(ctx, sb.TenantID, sb.ID, c.ID); err == nil {
		return fresh
	}
	return c
}
