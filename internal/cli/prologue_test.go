package cli

import (
	"errors"
	"strings"
	"testing"
)

// TestPrologues runs every command's prologue: the positional count it
// declares is enforced with its usage message, and --no-wait and --json
// exist exactly where the table says.
func TestPrologues(t *testing.T) {
	for name, p := range prologues {
		if p.args >= 0 {
			wrong := make([]string, p.args+1)
			for i := range wrong {
				wrong[i] = "x"
			}
			_, err := start(name, wrong, nil)
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), p.want) {
				t.Errorf("%s with %d arguments: %v, want a usage error naming %q", name, len(wrong), err, p.want)
			}
		}
		ok := make([]string, max(p.args, 0))
		for i := range ok {
			ok[i] = "x"
		}
		cl, err := start(name, append([]string{"--no-wait"}, ok...), nil)
		if (err == nil) != (p.noWait != "") {
			t.Errorf("%s --no-wait: %v (declared: %v)", name, err, p.noWait != "")
		}
		if err == nil && !cl.noWait {
			t.Errorf("%s --no-wait parsed as false", name)
		}
		cl, err = start(name, append([]string{"--json"}, ok...), nil)
		if (err == nil) != (p.json != "-") {
			t.Errorf("%s --json: %v", name, err)
		}
		if err == nil && !cl.json {
			t.Errorf("%s --json parsed as false", name)
		}
	}
	cl, err := start("exec", []string{"sbx_1", "--", "echo", "hi"}, nil)
	if err != nil || strings.Join(cl.rest, " ") != "echo hi" || cl.pos[0] != "sbx_1" {
		t.Fatalf("exec ID -- ARGV: %+v %v", cl, err)
	}
}
