package cli

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/version"
)

// commandPaths are every command of `space` and a flag its help must
// show ("" for a group, whose help lists its commands instead).
var commandPaths = []struct{ path, flag string }{
	{"", ""},
	{"sandbox", ""}, {"sandbox create", "--template"}, {"sandbox list", "--state"}, {"sandbox get", "--json"},
	{"sandbox delete", "--no-wait"}, {"sandbox pause", "--no-wait"}, {"sandbox suspend", "--no-wait"},
	{"sandbox wake", "--no-wait"}, {"sandbox keep", "--json"},
	{"sandbox network", ""}, {"sandbox network set", "--allow"}, {"sandbox network log", "--json"},
	{"checkpoint", ""}, {"checkpoint create", "--name"}, {"checkpoint list", "--json"}, {"checkpoint get", "--json"},
	{"checkpoint delete", "--json"},
	{"restore", "--no-wait"},
	{"exec", "--cwd"},
	{"files", ""}, {"files put", "--mode"}, {"files get", "--tar"}, {"files ls", "--json"},
	{"template", ""}, {"template build", "--from-oci"}, {"template list", "--json"}, {"template get", "--json"},
	{"template delete", "--force"},
	{"port", ""}, {"port list", "--json"}, {"port url", "--ttl"},
	{"op", ""}, {"op get", "--json"}, {"op wait", "--json"},
	{"secret", ""}, {"secret set", "--from-file"}, {"secret list", "--json"}, {"secret delete", "--json"},
	{"admin", ""}, {"admin tenant", ""}, {"admin tenant create", "--json"}, {"admin tenant list", "--json"},
	{"admin tenant quota", "--memory-mib"}, {"admin key", ""}, {"admin key create", "--format"}, {"admin key list", "--json"}, {"admin key delete", "--json"}, {"admin workers", "--json"},
	{"mcp", "--http"},
	{"version", "--client"},
}

// TestHelpEverywhere: help, -h and --help at every level exit 0 and print
// the command's usage and flags on stdout, nothing on stderr, as kubectl
// and gh do.
func TestHelpEverywhere(t *testing.T) {
	for _, c := range commandPaths {
		path := strings.Fields(c.path)
		for _, args := range [][]string{append(path, "--help"), append(path, "-h"), append([]string{"help"}, path...)} {
			var out, errb bytes.Buffer
			code := Run(t.Context(), args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
			if code != 0 || errb.Len() > 0 {
				t.Errorf("space %s: exit %d, stderr %q", strings.Join(args, " "), code, errb.String())
				continue
			}
			want := []string{"Usage:", "space " + c.path, "--help"}
			if c.flag != "" {
				want = append(want, c.flag)
			} else {
				want = append(want, "Available Commands:")
			}
			for _, w := range want {
				if !strings.Contains(out.String(), strings.TrimSpace(w)) {
					t.Errorf("space %s: stdout lacks %q:\n%s", strings.Join(args, " "), w, out.String())
				}
			}
		}
	}
}

// TestCommandPathsComplete: the table above names every command of the
// tree, so a new command is checked by TestHelpEverywhere too.
func TestCommandPathsComplete(t *testing.T) {
	listed := map[string]bool{}
	for _, c := range commandPaths {
		listed[c.path] = true
	}
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			p := strings.TrimPrefix(sub.CommandPath(), "space ")
			if sub.Name() == "help" || sub.Name() == "completion" || strings.HasPrefix(p, "completion ") {
				continue // cobra's own
			}
			if !listed[p] {
				t.Errorf("command %q is not in commandPaths", p)
			}
			// pflag, like Go's flag package, takes a backquoted word of a
			// flag's help for the name of its value.
			sub.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if strings.Contains(f.Usage, "`") {
					t.Errorf("%s --%s: a backquote in its help garbles it: %q", p, f.Name, f.Usage)
				}
			})
			walk(sub)
		}
	}
	walk(newRoot(&Env{}))
}

// TestUnknown: an unknown command or flag exits 2 with a hint on stderr
// and nothing on stdout.
func TestUnknown(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "space"`},
		{[]string{"sandboxx"}, "did you mean sandbox?"},
		{[]string{"sandbox", "bogus"}, `unknown command "bogus" for "space sandbox"`},
		{[]string{"sandbox", "craete"}, "did you mean create?"},
		{[]string{"admin", "key", "bogus"}, `unknown command "bogus" for "space admin key"`},
		{[]string{"sandbox", "create", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"sandbox", "get"}, "want a sandbox ID"},
		{[]string{"exec", "--bogus", "sbx_1", "--", "true"}, "unknown flag: --bogus"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"admin", "key", "create", "t", "--format", "pem"}, "--format must be space or e2b"},
		{[]string{"admin", "tenant", "quota", "t"}, "give at least one of --sandboxes"},
		{[]string{"admin", "tenant", "quota", "t", "--vcpus", "-1"}, "--vcpus must be 0 (unlimited) or more"},
		{[]string{"admin", "key", "list"}, "want a tenant name"},
		{[]string{"port", "url", "sbx_1"}, "want a sandbox ID and a port"},
		{[]string{"port", "url", "sbx_1", "http"}, "PORT must be a number from 1 to 65535"},
		{[]string{"port", "url", "sbx_1", "65536"}, "PORT must be a number from 1 to 65535"},
		{[]string{"port", "url", "sbx_1", "80", "--ttl", "soon"}, "invalid argument"},
		{[]string{"help", "bogus"}, `unknown help topic "bogus"`},
		{[]string{"help", "sandbox", "bogus"}, `unknown help topic "sandbox bogus"`},
	} {
		var out, errb bytes.Buffer
		code := Run(t.Context(), tc.args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		if code != 2 || !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "--help' for usage") || out.Len() > 0 {
			t.Errorf("space %s: exit %d, stdout %q, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, out.String(), errb.String(), tc.want)
		}
	}
}

// TestVersionCommand: space --version and space version --client print
// this build; space version asks the server too.
func TestVersionCommand(t *testing.T) {
	want := version.Get().String()
	for _, args := range [][]string{{"--version"}, {"version", "--client"}} {
		var out, errb bytes.Buffer
		code := Run(t.Context(), args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		if code != 0 || !strings.Contains(out.String(), want) {
			t.Errorf("space %s: exit %d, stdout %q, stderr %q; want %q", strings.Join(args, " "), code, out.String(), errb.String(), want)
		}
	}
	// Without a server, the client's version is printed and the exit is 1.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, _ := client.New("http://"+addr, "", nil)
	var out, errb bytes.Buffer
	code := Run(t.Context(), []string{"version"}, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Client: c})
	if code != 1 || !strings.Contains(out.String(), "client: "+want) || !strings.Contains(errb.String(), "server version") {
		t.Errorf("space version without a server: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
