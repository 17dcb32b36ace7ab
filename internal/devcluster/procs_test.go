package devcluster

import "testing"

func TestFlagLine(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"  -listen string", "listen"},
		{"  --object-store-credentials-file string", "object-store-credentials-file"},
		{"    \tbound on the local cache of objects downloaded from --object-store", ""},
		{"Usage of spaced worker:", ""},
	} {
		got := ""
		if m := flagLine.FindStringSubmatch(c.line); m != nil {
			got = m[1]
		}
		if got != c.want {
			t.Errorf("%q: flag %q, want %q", c.line, got, c.want)
		}
	}
}
