package api

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/version"
)

// GET /v1/version answers without a key, in the contract's shape, what
// the build says of itself.
func TestVersion(t *testing.T) {
	old := version.Version
	version.Version = "v9.8.7"
	t.Cleanup(func() { version.Version = old })
	e := newEnv(t, Config{})
	status, _, body := e.do("GET", "/v1/version", "", nil)
	if status != 200 {
		t.Fatalf("GET /v1/version without a key: %d %s", status, body)
	}
	var fields map[string]any
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"version", "commit", "go_version", "api"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("no %q in %s", f, body)
		}
	}
	var v apiv1.Version
	json.Unmarshal(body, &v)
	if v.Version != "v9.8.7" || v.API != "v1" || v.GoVersion != runtime.Version() || v.Commit == "" {
		t.Errorf("version %+v", v)
	}
}
