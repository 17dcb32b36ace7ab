package agentclient

import (
	"context"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
)

// Timeouts bound every call into a guest, whatever context the caller
// passes: a paused, frozen or fork-bombed guest must never hold a host
// goroutine (or a server's start-up) for ever. A caller's earlier deadline
// still wins.
type Timeouts struct {
	// Connect bounds dialling the link and its sync handshake.
	Connect time.Duration
	// Call bounds a request/response call, and the first answer of a
	// streaming call (ReadFile, TarOut).
	Call time.Duration
	// SlowCall bounds the calls whose work grows with the guest's data:
	// freezing (syncs every dirty page) and recursive deletes.
	SlowCall time.Duration
}

// DefaultTimeouts are what New uses.
func DefaultTimeouts() Timeouts {
	return Timeouts{Connect: 10 * time.Second, Call: 30 * time.Second, SlowCall: 2 * time.Minute}
}

// SetTimeouts replaces the client's bounds (zero fields keep theirs).
func (c *Client) SetTimeouts(t Timeouts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Connect > 0 {
		c.timeouts.Connect = t.Connect
	}
	if t.Call > 0 {
		c.timeouts.Call = t.Call
	}
	if t.SlowCall > 0 {
		c.timeouts.SlowCall = t.SlowCall
	}
}

// bound is the client's bound for one call of op (0 for connecting).
func (c *Client) bound(op agentproto.Op) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch op {
	case "":
		return c.timeouts.Connect
	case agentproto.OpFreeze, agentproto.OpDelete:
		return c.timeouts.SlowCall
	}
	return c.timeouts.Call
}

// bounded returns ctx with a deadline no later than d from now.
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
