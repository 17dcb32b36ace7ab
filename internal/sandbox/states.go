package sandbox

import (
	"slices"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// Verb is something done to a sandbox.
type Verb string

// The verbs of the state machine.
const (
	Create     Verb = "create"     // a new sandbox boots from a template
	Branch     Verb = "branch"     // a new sandbox boots from a checkpoint
	Delete     Verb = "delete"     // its VM and files go
	Pause      Verb = "pause"      // its vCPUs stop, memory stays
	Suspend    Verb = "suspend"    // its memory goes to disk, the VM exits
	Wake       Verb = "wake"       // a paused or suspended sandbox runs again
	Restore    Verb = "restore"    // its VM is replaced by a checkpoint's
	Checkpoint Verb = "checkpoint" // a snapshot is kept; the sandbox stays as it is
	Keep       Verb = "keep"       // its timeout is extended
	Network    Verb = "network"    // its egress policy is replaced
)

// Rule is one verb's row of the state machine: the states it may start
// from, the state the sandbox shows while it runs and the state it ends in.
// A state is checked twice: when the verb is asked for, for a prompt 409,
// and when its operation starts, because the engine runs the operations of
// one sandbox one after another and an earlier one may have moved it.
type Rule struct {
	Verb Verb
	// From are the states the verb may start from (none: the verb makes
	// the sandbox, in state During).
	From []store.SandboxState
	// During is the sandbox's state while the verb runs ("": unchanged).
	During store.SandboxState
	// To is the state it ends in ("": unchanged).
	To store.SandboxState
	// Step names the verb's progress while it runs.
	Step string
	// FailOnDataLoss: a data_loss error means the sandbox's state is gone
	// (wake), rather than that the input was bad and the sandbox untouched
	// (restore).
	FailOnDataLoss bool
}

const (
	creating   = store.SandboxCreating
	running    = store.SandboxRunning
	pausing    = store.SandboxPausing
	paused     = store.SandboxPaused
	suspending = store.SandboxSuspending
	suspended  = store.SandboxSuspended
	waking     = store.SandboxWaking
	deleting   = store.SandboxDeleting
	deleted    = store.SandboxDeleted
	failed     = store.SandboxFailed
)

// rules is the state machine. A sandbox fails (-> failed) from During when
// its worker loses the VM; failed sandboxes can only be deleted.
var rules = []Rule{
	{Verb: Create, During: creating, To: running, Step: "booting"},
	{Verb: Branch, During: creating, To: running, Step: "restoring checkpoint"},
	// A sandbox still being created or in another transition cannot be
	// deleted until that ends.
	{Verb: Delete, From: []store.SandboxState{running, paused, suspended, failed}, During: deleting, To: deleted, Step: "stopping"},
	{Verb: Pause, From: []store.SandboxState{running}, During: pausing, To: paused, Step: "pausing"},
	{Verb: Suspend, From: []store.SandboxState{running, paused}, During: suspending, To: suspended, Step: "suspending"},
	{Verb: Wake, From: []store.SandboxState{paused, suspended}, During: waking, To: running, Step: "waking", FailOnDataLoss: true},
	// A restore replaces the VM; the sandbox shows waking meanwhile.
	{Verb: Restore, From: []store.SandboxState{running, paused, suspended}, During: waking, To: running, Step: "restoring"},
	{Verb: Checkpoint, From: []store.SandboxState{running, paused}, Step: "copying"},
	{Verb: Keep, From: []store.SandboxState{creating, running, pausing, paused, suspending, suspended, waking}},
	// Its egress path exists from creation until deletion.
	{Verb: Network, From: []store.SandboxState{running, paused, suspended}},
}

// RuleOf is verb's row. It panics on a verb outside the table: a verb is a
// constant of this package, never input.
func RuleOf(v Verb) Rule {
	for _, r := range rules {
		if r.Verb == v {
			r.From = slices.Clone(r.From)
			return r
		}
	}
	panic("sandbox: no rule for verb " + string(v))
}

// Rules is the whole table, in order.
func Rules() []Rule {
	out := make([]Rule, 0, len(rules))
	for _, r := range rules {
		out = append(out, RuleOf(r.Verb))
	}
	return out
}

// Allows says whether the verb may start from st.
func (r Rule) Allows(st store.SandboxState) bool { return slices.Contains(r.From, st) }

// Check is the conflict (409, the current state in details) of asking for
// the verb while sb is in a state it may not start from.
func (r Rule) Check(sb *store.Sandbox) error { return RequireState(sb, r.From...) }

// Running are the states to leave when the verb's work is done: During, or
// for a verb without one, the states it started from.
func (r Rule) Running() []store.SandboxState {
	if r.During == "" {
		return slices.Clone(r.From)
	}
	return []store.SandboxState{r.During}
}

// RequireState is the conflict (409, the current state in details) of a
// call that needs sb in one of states.
func RequireState(sb *store.Sandbox, states ...store.SandboxState) error {
	if slices.Contains(states, sb.State) {
		return nil
	}
	return errdefs.New(errdefs.ErrConflict, "sandbox %s is %s", sb.ID, sb.State).
		WithDetails(map[string]any{"state": string(sb.State)})
}

// States are every sandbox state.
func States() []store.SandboxState {
	return []store.SandboxState{creating, running, pausing, paused, suspending, suspended, waking, deleting, deleted, failed}
}

// Known says whether st names a sandbox state.
func Known(st string) bool { return slices.Contains(States(), store.SandboxState(st)) }

// Gone are the states of a sandbox that is listed only when asked for by
// state, and counted nowhere.
func Gone() []store.SandboxState { return []store.SandboxState{deleted} }

// WithoutVM are the states of a sandbox whose worker holds no VM for it:
// reconcile and template-use counts skip them.
func WithoutVM() []store.SandboxState { return []store.SandboxState{deleted, failed} }

// Only is the one state st, for a transition out of a state known only at
// run time (the worker reports it, or the sandbox was found in it).
func Only(st store.SandboxState) []store.SandboxState { return []store.SandboxState{st} }
