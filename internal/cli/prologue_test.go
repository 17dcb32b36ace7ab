package cli

import (
	"bytes"
	"strings"
	"testing"
)

// parseOnly runs the command line up to the parsed call: the exit code,
// the call (nil when the command did not run) and stderr.
func parseOnly(t *testing.T, args ...string) (int, *call, string) {
	t.Helper()
	var got *call
	var out, errb bytes.Buffer
	env := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, parsed: func(_ string, cl *call) { got = cl }}
	code := Run(t.Context(), args, env)
	return code, got, errb.String()
}

// TestPrologues runs every command's prologue: the positional count it
// declares is enforced with its usage message, and --no-wait and --json
// exist exactly where the table says.
func TestPrologues(t *testing.T) {
	for name, p := range prologues {
		path := strings.Fields(name)
		if p.args >= 0 {
			wrong := make([]string, p.args+1)
			for i := range wrong {
				wrong[i] = "x"
			}
			code, cl, stderr := parseOnly(t, append(path, wrong...)...)
			if code != 2 || cl != nil || !strings.Contains(stderr, p.want) || !strings.Contains(stderr, "space "+name+" --help") {
				t.Errorf("%s with %d arguments: exit %d, %q; want 2 and a usage error naming %q", name, len(wrong), code, stderr, p.want)
			}
		}
		ok := make([]string, max(p.args, 0))
		for i := range ok {
			ok[i] = "x"
		}
		code, cl, stderr := parseOnly(t, append(append(path, "--no-wait"), ok...)...)
		if (code == 0) != (p.noWait != "") {
			t.Errorf("%s --no-wait: exit %d %s (declared: %v)", name, code, stderr, p.noWait != "")
		}
		if code == 0 && !cl.noWait {
			t.Errorf("%s --no-wait parsed as false", name)
		}
		code, cl, stderr = parseOnly(t, append(append(path, "--json"), ok...)...)
		if (code == 0) != (p.json != "-") {
			t.Errorf("%s --json: exit %d %s", name, code, stderr)
		}
		if code == 0 && !cl.json {
			t.Errorf("%s --json parsed as false", name)
		}
	}
	code, cl, _ := parseOnly(t, "exec", "-t", "sbx_1", "--", "echo", "-n", "hi")
	if code != 0 || strings.Join(cl.rest, " ") != "echo -n hi" || len(cl.pos) != 1 || cl.pos[0] != "sbx_1" {
		t.Fatalf("exec ID -- ARGV: %d %+v", code, cl)
	}
}
