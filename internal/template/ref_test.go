package template

import (
	"strings"
	"testing"
)

func TestRef(t *testing.T) {
	dig := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		in   string
		want Ref
		bad  bool
	}{
		{in: "base", want: Ref{Name: "base"}},
		{in: "app@" + dig, want: Ref{Name: "app", Digest: dig}},
		{in: "app@sha256:12", bad: true},
		{in: "App", bad: true},
		{in: "", bad: true},
	} {
		got, err := Parse(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v (invalid %v)", c.in, got, err, c.want, c.bad)
		}
		if !c.bad && (got.String() != c.in || got.Pinned() != (c.want.Digest != "")) {
			t.Errorf("Parse(%q).String() = %q, Pinned %v", c.in, got.String(), got.Pinned())
		}
	}
}
