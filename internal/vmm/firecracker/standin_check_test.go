package firecracker

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
)

// TestStandinChecksSpec shows the stand-in has teeth: requests that break
// the specification are answered 400 and logged as violations, and the
// state rules answer as Firecracker does, so the driver's tests passing
// means its requests are valid.
func TestStandinChecksSpec(t *testing.T) {
	r := newRig(t, standinConfig{})
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	kernel := filepath.Join(dir, "k")
	if err := os.WriteFile(kernel, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	js := jail.Spec{
		Files: []jail.File{{Name: "run", Source: run, Writable: true}, {Name: "vmlinux", Source: kernel}},
		Args:  []string{"firecracker", "--api-sock", "/run/api.sock", "--id", "check"},
	}
	cmd, _, err := r.d.launch(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	c := newClient(filepath.Join(run, "api.sock"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.await(ctx, done); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path, body string
		violation                bool
	}{
		{"vcpu_count below minimum", "PUT", "/machine-config", `{"vcpu_count":0,"mem_size_mib":128}`, true},
		{"required field missing", "PUT", "/machine-config", `{"vcpu_count":1}`, true},
		{"unknown field", "PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":128,"vcpus":2}`, true},
		{"wrong type", "PUT", "/machine-config", `{"vcpu_count":"1","mem_size_mib":128}`, true},
		{"vm state not in enum", "PATCH", "/vm", `{"state":"Stopped"}`, true},
		{"action not in enum", "PUT", "/actions", `{"action_type":"Reboot"}`, true},
		{"backend not in enum", "PUT", "/snapshot/load", `{"snapshot_path":"/run/s","mem_backend":{"backend_type":"Disk","backend_path":"/m"}}`, true},
		{"guest_cid below minimum", "PUT", "/vsock", `{"guest_cid":2,"uds_path":"/run/v.sock"}`, true},
		{"no such path", "PUT", "/reboot", `{}`, true},
		{"no such method", "DELETE", "/vm", ``, true},
		{"body missing", "PUT", "/boot-source", ``, true},
		// Valid requests that Firecracker refuses in this state: a fault, no violation.
		{"start without a kernel", "PUT", "/actions", `{"action_type":"InstanceStart"}`, false},
		{"pause before boot", "PATCH", "/vm", `{"state":"Paused"}`, false},
		{"snapshot before boot", "PUT", "/snapshot/create", `{"snapshot_path":"/run/s","mem_file_path":"/run/m"}`, false},
		{"kernel outside the jail", "PUT", "/boot-source", `{"kernel_image_path":"/boot/vmlinux"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(readCalls(t, r.log))
			err := c.do(ctx, tc.method, tc.path, rawBody(tc.body), nil, time.Second)
			var ae *apiCallError
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !errors.Is(err, errdefs.ErrFailedPrecondition) || ae.Fault == "" {
				t.Fatalf("answer = %v, want 400 with a fault message", err)
			}
			calls := readCalls(t, r.log)
			if len(calls) != before+1 {
				t.Fatalf("%d calls logged, want 1", len(calls)-before)
			}
			if got := calls[before].Violation != ""; got != tc.violation {
				t.Errorf("violation logged = %v (%q), want %v", got, calls[before].Violation, tc.violation)
			}
		})
	}
	// A valid configuration is accepted; after InstanceStart a snapshot
	// load is refused and pre-boot resources are too.
	for _, step := range [][3]string{
		{"PUT", "/boot-source", `{"kernel_image_path":"/vmlinux"}`},
		{"PUT", "/actions", `{"action_type":"InstanceStart"}`},
	} {
		if err := c.do(ctx, step[0], step[1], rawBody(step[2]), nil, time.Second); err != nil {
			t.Fatalf("%s %s: %v", step[0], step[1], err)
		}
	}
	for _, step := range [][3]string{
		{"PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":128}`},
		{"PUT", "/snapshot/load", `{"snapshot_path":"/run/s","mem_backend":{"backend_type":"File","backend_path":"/run/m"}}`},
		{"PUT", "/snapshot/create", `{"snapshot_path":"/run/s","mem_file_path":"/run/m"}`}, // not paused
	} {
		if err := c.do(ctx, step[0], step[1], rawBody(step[2]), nil, time.Second); !isAPIError(err) {
			t.Errorf("%s %s after start = %v, want a 400", step[0], step[1], err)
		}
	}
	for _, c := range readCalls(t, r.log) {
		if c.Violation != "" && c.Status != 400 {
			t.Errorf("%s: violation answered %d", c, c.Status)
		}
	}
}

// rawBody sends s as the body as it is (nil when empty).
type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

func rawBody(s string) any {
	if s == "" {
		return nil
	}
	return rawJSON(s)
}

// isAPIError reports whether err is an answer of the API (rather than a
// failure to reach it).
func isAPIError(err error) bool {
	var e *apiCallError
	return errors.As(err, &e)
}
