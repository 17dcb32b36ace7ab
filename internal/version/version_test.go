package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestGet(t *testing.T) {
	old, oldCommit := Version, Commit
	t.Cleanup(func() { Version, Commit = old, oldCommit })
	Version, Commit = "v1.2.3", "abc"
	if got := Get(); got != (Info{Version: "v1.2.3", Commit: "abc", GoVersion: runtime.Version(), API: "v1"}) {
		t.Errorf("link-time values: %+v", got)
	}
	Version, Commit = "", ""
	if got := Get(); got.Version == "" || got.Commit == "" || got.API != "v1" {
		t.Errorf("without link-time values: %+v", got)
	}
}

func TestVCSRevision(t *testing.T) {
	for _, tc := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, ""},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}, "abc"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}, "abc-dirty"},
	} {
		if got := vcsRevision(tc.settings); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.settings, got, tc.want)
		}
	}
}
