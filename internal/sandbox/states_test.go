package sandbox

import (
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// TestRulesNameKnownStates: every row names real states, and only verbs
// that make a sandbox start from nothing.
func TestRulesNameKnownStates(t *testing.T) {
	seen := map[Verb]bool{}
	for _, r := range Rules() {
		if seen[r.Verb] {
			t.Errorf("%s has two rows", r.Verb)
		}
		seen[r.Verb] = true
		makes := r.Verb == Create || r.Verb == Branch
		if makes != (len(r.From) == 0) {
			t.Errorf("%s: From = %v; only create and branch start from no state", r.Verb, r.From)
		}
		for _, st := range append(r.From, r.During, r.To) {
			if st != "" && !Known(string(st)) {
				t.Errorf("%s names unknown state %q", r.Verb, st)
			}
		}
	}
}

func TestTransitions(t *testing.T) {
	for _, tc := range []struct {
		verb  Verb
		from  store.SandboxState
		allow bool
	}{
		{Pause, store.SandboxRunning, true},
		{Pause, store.SandboxPaused, false},
		{Suspend, store.SandboxPaused, true},
		{Wake, store.SandboxRunning, false},
		{Wake, store.SandboxSuspended, true},
		{Restore, store.SandboxSuspended, true},
		{Delete, store.SandboxFailed, true},
		{Delete, store.SandboxCreating, false},
		{Delete, store.SandboxDeleting, false},
		{Checkpoint, store.SandboxSuspended, false},
		{Keep, store.SandboxWaking, true},
		{Keep, store.SandboxDeleting, false},
		{Network, store.SandboxSuspended, true},
		{Network, store.SandboxFailed, false},
	} {
		r := RuleOf(tc.verb)
		if got := r.Allows(tc.from); got != tc.allow {
			t.Errorf("%s from %s: allowed = %v, want %v", tc.verb, tc.from, got, tc.allow)
		}
		err := r.Check(&store.Sandbox{ID: "sbx_1", State: tc.from})
		if (err == nil) != tc.allow {
			t.Errorf("%s from %s: Check = %v", tc.verb, tc.from, err)
		}
		if err != nil {
			_, _, details := errdefs.Render(err)
			if errdefs.ClassOf(err) != errdefs.ErrConflict || details["state"] != string(tc.from) {
				t.Errorf("%s from %s: Check = %v (class %v, details %v), want a conflict naming the state", tc.verb, tc.from, err, errdefs.ClassOf(err), details)
			}
		}
	}
}

// TestRunning: a verb with a transitional state leaves only that; one
// without (checkpoint) leaves the states it started from.
func TestRunning(t *testing.T) {
	if got := RuleOf(Wake).Running(); len(got) != 1 || got[0] != store.SandboxWaking {
		t.Errorf("wake Running = %v", got)
	}
	if got := RuleOf(Checkpoint).Running(); len(got) != 2 {
		t.Errorf("checkpoint Running = %v, want its From", got)
	}
	r := RuleOf(Delete)
	r.From[0] = store.SandboxCreating // a caller's copy
	if RuleOf(Delete).Allows(store.SandboxCreating) {
		t.Error("editing a Rule's From changed the table")
	}
}
