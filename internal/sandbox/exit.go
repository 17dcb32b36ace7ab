package sandbox

import (
	"encoding/json"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/store"
)

// Exit is how a command ended, as the store keeps it in Command.Exit: the
// exit status plus the sequence number of the exit event, so a replay can
// number it. Its JSON is the API's exit status plus "seq".
type Exit struct {
	ExitCode *int       `json:"exit_code"`
	Signal   *string    `json:"signal"`
	Reason   string     `json:"reason"`
	EndedAt  *time.Time `json:"ended_at,omitempty"`
	Seq      uint64     `json:"seq,omitempty"`
}

// ExitOf is the exit an agent reported, numbered seq.
func ExitOf(e *agentproto.ExitStatus, seq uint64) Exit {
	out := Exit{ExitCode: e.ExitCode, Reason: e.Reason, Seq: seq}
	if e.Signal != "" {
		sig := e.Signal
		out.Signal = &sig
	}
	if !e.EndedAt.IsZero() {
		t := e.EndedAt.UTC()
		out.EndedAt = &t
	}
	return out
}

// DecodeExit reads the exit the store keeps of c; false while it has none.
func DecodeExit(c *store.Command) (Exit, bool) {
	var ex Exit
	if len(c.Exit) == 0 || json.Unmarshal(c.Exit, &ex) != nil || ex.Reason == "" {
		return ex, false
	}
	return ex, true
}
