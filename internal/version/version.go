// Package version says which build of SPACE is running: the version and
// commit set at link time (make build passes them with -ldflags -X), else
// what the Go toolchain recorded in the binary (runtime/debug.ReadBuildInfo:
// the module version of a `go install`, the VCS revision of a build in a
// checkout). It is a leaf: the CLI, the server and the API all print the
// same Info.
package version

import (
	"runtime"
	"runtime/debug"
)

// Version and Commit are set at link time:
//
//	go build -ldflags "-X github.com/space-sandbox/space/internal/version.Version=v0.1.0 \
//	  -X github.com/space-sandbox/space/internal/version.Commit=$(git rev-parse HEAD)"
//
// Empty: taken from the build information.
var (
	Version string
	Commit  string
)

// API is the HTTP API version this build serves.
const API = "v1"

// Info is what a build says of itself (GET /v1/version, `space version`,
// `spaced --version`).
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
	API       string `json:"api"`
}

// Get is this binary's Info: the link-time values where set, else the
// build information's; "devel" and "unknown" when neither says.
func Get() Info {
	info := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version(), API: API}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		if info.Commit == "" {
			info.Commit = vcsRevision(bi.Settings)
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// vcsRevision is the revision the toolchain stamped (go build in a VCS
// checkout without -buildvcs=false), with "-dirty" for local changes.
func vcsRevision(settings []debug.BuildSetting) string {
	var rev string
	dirty := false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}

// String is the one-line form: "v0.1.0 (commit abc123, go1.26.0, API v1)".
func (i Info) String() string {
	return i.Version + " (commit " + i.Commit + ", " + i.GoVersion + ", API " + i.API + ")"
}
