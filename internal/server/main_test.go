package server

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/version"
)

// spaced's command line follows kubectl's and gh's conventions: help in
// every spelling exits 0 with the mode's usage and flags on stdout; an
// unknown mode or flag exits 2 with a hint on stderr; --version prints
// the build.
func TestMainHelpAndVersion(t *testing.T) {
	t.Setenv(StoreEnv, "")
	type want struct {
		code   int
		stdout []string // each must appear
		stderr []string
	}
	single := []string{"spaced control [flags]", "spaced worker [flags]", "--listen string", "--kernel-dir string",
		"guest kernel cache (filled by make setup)"}
	worker := []string{"spaced worker", "--token-file string", "--accel string"}
	control := []string{"spaced control", "--worker-token-file string", "--store string"}
	for _, tc := range []struct {
		args []string
		want want
	}{
		{[]string{"--help"}, want{0, single, nil}},
		{[]string{"-h"}, want{0, single, nil}},
		{[]string{"help"}, want{0, single, nil}},
		{[]string{"worker", "--help"}, want{0, worker, nil}},
		{[]string{"worker", "-h"}, want{0, worker, nil}},
		{[]string{"help", "worker"}, want{0, worker, nil}},
		{[]string{"control", "--help"}, want{0, control, nil}},
		{[]string{"control", "-h"}, want{0, control, nil}},
		{[]string{"help", "control"}, want{0, control, nil}},
		{[]string{"--version"}, want{0, []string{"spaced " + version.Get().Version, "API v1"}, nil}},
		{[]string{"version"}, want{0, []string{"spaced " + version.Get().Version}, nil}},
		{[]string{"bogus"}, want{2, nil, []string{`unknown command "bogus"`, "spaced --help"}}},
		{[]string{"help", "bogus"}, want{2, nil, []string{`unknown help topic "bogus"`}}},
		{[]string{"--bogus"}, want{2, nil, []string{"-bogus", "spaced --help"}}},
		{[]string{"worker", "--quota-vcpus", "3"}, want{2, nil, []string{"quota-vcpus", "spaced worker --help"}}},
		{[]string{"control", "--bogus"}, want{2, nil, []string{"-bogus", "spaced control --help"}}},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(tc.args, &stdout, &stderr)
		if code != tc.want.code {
			t.Errorf("spaced %v: exit %d, want %d (stderr %q)", tc.args, code, tc.want.code, stderr.String())
		}
		for _, s := range tc.want.stdout {
			if !strings.Contains(stdout.String(), s) {
				t.Errorf("spaced %v: stdout lacks %q:\n%s", tc.args, s, stdout.String())
			}
		}
		for _, s := range tc.want.stderr {
			if !strings.Contains(stderr.String(), s) {
				t.Errorf("spaced %v: stderr lacks %q: %q", tc.args, s, stderr.String())
			}
		}
		if tc.want.code == 0 && stderr.Len() > 0 {
			t.Errorf("spaced %v: wrote to stderr: %q", tc.args, stderr.String())
		}
		if tc.want.code != 0 && stdout.Len() > 0 {
			t.Errorf("spaced %v: wrote to stdout: %q", tc.args, stdout.String())
		}
	}
}

// No flag's help has a backquote: the flag package takes a backquoted
// word for the value's name and garbles the line ("-kernel-dir make setup").
func TestFlagHelpHasNoBackquotes(t *testing.T) {
	for _, mode := range []string{"", "worker", "control"} {
		var stdout bytes.Buffer
		if code := Main(append(strings.Fields(mode), "--help"), &stdout, &stdout); code != 0 {
			t.Fatalf("spaced %s --help: exit %d", mode, code)
		}
		n := 0
		for _, line := range strings.Split(stdout.String(), "\n") {
			if strings.HasPrefix(line, "  --") {
				n++
				// "--name" and at most one word naming its value's type
				if f := strings.Fields(line); len(f) > 2 {
					t.Errorf("spaced %s: a backquoted usage became the value's name: %q", mode, line)
				}
			}
		}
		if n < 10 {
			t.Errorf("spaced %s --help lists %d flags:\n%s", mode, n, stdout.String())
		}
	}
	var fs flag.FlagSet
	fs.String("x", "", "filled by `make setup`")
	if name, _ := flag.UnquoteUsage(fs.Lookup("x")); name != "make setup" {
		t.Fatalf("the flag package no longer reads backquotes as the value name (%q): this test's reason is gone", name)
	}
}
