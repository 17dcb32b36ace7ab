package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

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

// ExitOf is the exit an agent reported, numbered seq, as the host records
// it: an exit the guest may not report (checkGuestExit) is "lost", the
// host's word for a process that ended in a way nobody trustworthy saw,
// and a time after the host's now is the host's now.
func ExitOf(e *agentproto.ExitStatus, seq uint64) Exit {
	now := time.Now().UTC()
	if checkGuestExit(e) != nil {
		return Exit{Reason: agentproto.ReasonLost, EndedAt: &now, Seq: seq}
	}
	out := Exit{ExitCode: e.ExitCode, Reason: e.Reason, Seq: seq}
	if e.Signal != "" {
		sig := e.Signal
		out.Signal = &sig
	}
	if !e.EndedAt.IsZero() {
		t := e.EndedAt.UTC()
		if t.After(now) {
			t = now
		}
		out.EndedAt = &t
	}
	return out
}

// checkGuestExit says why e is not an exit a guest may report: its reason
// is one the agent gives (lost, sandbox_deleted and the server's timeout
// are the host's to decide, never a guest's), an exit code between 0 and
// 255 exactly when the process exited, and a signal that Linux has (or
// none: a real-time signal has no name) only when it did not.
func checkGuestExit(e *agentproto.ExitStatus) error {
	switch {
	case e == nil:
		return errors.New("no exit status")
	case e.Reason == agentproto.ReasonExited:
		if e.ExitCode == nil || *e.ExitCode < 0 || *e.ExitCode > 255 || e.Signal != "" {
			return fmt.Errorf("reason %q needs an exit code of 0 to 255 and no signal", e.Reason)
		}
	case guestSignalReasons[e.Reason]:
		if e.ExitCode != nil || (e.Signal != "" && unix.SignalNum(e.Signal) == 0) {
			return fmt.Errorf("reason %q needs a signal (%.32q) and no exit code", e.Reason, e.Signal)
		}
	default:
		return fmt.Errorf("reason %.32q is not one a guest may report", e.Reason)
	}
	return nil
}

// guestSignalReasons are the reasons a guest gives a process a signal
// ended: its own kill (the command's timeout_seconds, a SIGKILL asked
// for), the guest kernel's OOM killer, or any other signal.
var guestSignalReasons = map[string]bool{
	agentproto.ReasonSignaled: true,
	agentproto.ReasonTimeout:  true,
	agentproto.ReasonKilled:   true,
	agentproto.ReasonOOM:      true,
}

// DecodeExit reads the exit the store keeps of c; false while it has none.
func DecodeExit(c *store.Command) (Exit, bool) {
	var ex Exit
	if len(c.Exit) == 0 || json.Unmarshal(c.Exit, &ex) != nil || ex.Reason == "" {
		return ex, false
	}
	return ex, true
}
