package firecracker

// The stand-in for the Firecracker process. No Firecracker can run where
// these tests run, so the driver's launch is replaced (standinLaunch) by a
// re-execution of the test binary that serves Firecracker's API on the
// socket the driver names, from inside the view the jail would give it
// (paths are the jail's, resolved through the jail.Spec the driver built).
//
// Every request is checked against the API specification
// (testdata/firecracker-api.yaml, Swagger 2.0, converted to OpenAPI 3 and
// validated with kin-openapi's openapi3filter; objects are closed, as
// Firecracker's own parser rejects unknown fields), and every answer the
// stand-in gives is checked against it too. On top of the schema, the
// stand-in keeps Firecracker's state rules (pre-boot resources only before
// InstanceStart, /snapshot/load only on a fresh process, snapshots only of
// a paused VM, PATCH /vm only after boot) and answers a request it refuses
// as Firecracker does: 400 with an Error body. Each request is logged as a
// JSON line for the tests to read; a request that breaks the spec is
// logged with its violation.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/jail"
)

const (
	envStandin   = "SPACE_FC_STANDIN"
	specFile     = "testdata/firecracker-api.yaml"
	standinGreet = "stand-in agent ready"
)

// standinConfig is what the test hands the stand-in process.
type standinConfig struct {
	Spec  string      `json:"spec"` // absolute path of the API spec
	Log   string      `json:"log"`  // request log (JSON lines)
	Files []jail.File `json:"files"`
	// Fail answers the first request "METHOD /path" with FailStatus
	// (default 400) and an Error body.
	Fail       string `json:"fail,omitempty"`
	FailStatus int    `json:"fail_status,omitempty"`
	// Hang holds the first request "METHOD /path" without answering.
	Hang string `json:"hang,omitempty"`
	// InJail: the stand-in runs inside the real jail, where the jail's
	// paths are its own (resolve checks only that they are bound).
	InJail bool `json:"in_jail,omitempty"`
	// Flood: once its logger is set, the stand-in writes this many bytes,
	// then "LAST LINE", to its stdout (the guest's console), its stderr
	// and its logger, as a VMM with a flooding guest does.
	Flood int64 `json:"flood,omitempty"`
	// Plant: /snapshot/create leaves this where the snapshot's files go
	// ("symlink" or "hardlink" to PlantTarget, "fifo", "dir"), as a VMM
	// taken over by its guest could.
	Plant       string `json:"plant,omitempty"`
	PlantTarget string `json:"plant_target,omitempty"`
}

// call is one logged request.
type call struct {
	Method    string          `json:"method"`
	Path      string          `json:"path"`
	Body      json.RawMessage `json:"body,omitempty"`
	Status    int             `json:"status"`
	Fault     string          `json:"fault,omitempty"`
	Violation string          `json:"violation,omitempty"`
	// Resolved maps each jail path in the request to its host source, with
	// "(rw)" appended when the jail binds it writable.
	Resolved map[string]string `json:"resolved,omitempty"`
}

func (c call) String() string { return c.Method + " " + c.Path }

// standinLaunch returns a launch that starts the stand-in with cfg (Log and
// Spec filled in) in place of the jailed VMM.
func standinLaunch(t *testing.T, cfg standinConfig) launch {
	return func(js jail.Spec, netns *os.File) (*exec.Cmd, jail.State, error) {
		c := cfg
		c.Files = js.Files
		b, err := json.Marshal(c)
		if err != nil {
			return nil, jail.State{}, err
		}
		cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, js.Args[1:]...)...)
		cmd.Env = append(os.Environ(), envStandin+"="+string(b))
		cmd.Stdout, cmd.Stderr = js.Stdout, js.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if len(js.Logs) > 0 {
			// As jail.Start does: the copier of its logs.
			if _, err := jail.StartLogCopier(js.Root, js.Logs); err != nil {
				return nil, jail.State{}, err
			}
		}
		if netns == nil {
			return cmd, jail.State{}, cmd.Start()
		}
		// As the jail will once it can: the VMM runs in the tap's namespace.
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // not unlocked: the thread leaves its namespace with it
			if err := unix.Setns(int(netns.Fd()), unix.CLONE_NEWNET); err != nil {
				errc <- err
				return
			}
			errc <- cmd.Start()
		}()
		return cmd, jail.State{}, <-errc
	}
}

// readCalls reads the stand-in's request log.
func readCalls(t *testing.T, path string) []call {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var calls []call
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var c call
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("stand-in log line %q: %v", line, err)
		}
		calls = append(calls, c)
	}
	return calls
}

// runStandin is the stand-in process's main.
func runStandin(raw string) {
	var cfg standinConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "stand-in: config:", err)
		os.Exit(2)
	}
	var apiSock, id string
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--api-sock":
			i++
			apiSock = args[i]
		case "--id":
			i++
			id = args[i]
		case "-test.run=^$":
		default:
			fmt.Fprintln(os.Stderr, "stand-in: unknown firecracker argument", args[i])
			os.Exit(2)
		}
	}
	s, err := newStandin(cfg, id)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in:", err)
		os.Exit(2)
	}
	host, _, err := s.resolve(apiSock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in: --api-sock:", err)
		os.Exit(2)
	}
	l, err := net.Listen("unix", host)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in:", err)
		os.Exit(2)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	_ = srv.Serve(l)
	os.Exit(1)
}

// loadSpec reads the Swagger 2.0 spec and converts it to OpenAPI 3, with
// every object schema closed to unknown properties.
func loadSpec(path string) (*openapi3.T, routers.Router, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var doc2 openapi2.T
	if err := openapi2.UnmarshalFromData(b, &doc2); err != nil {
		return nil, nil, fmt.Errorf("parse spec: %w", err)
	}
	doc, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return nil, nil, fmt.Errorf("convert spec: %w", err)
	}
	closed := false
	for _, ref := range doc.Components.Schemas {
		if s := ref.Value; s != nil && s.Type.Is(openapi3.TypeObject) && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties = openapi3.AdditionalProperties{Has: openapi3.Ptr(false)}
			closed = true
		}
	}
	if !closed {
		return nil, nil, fmt.Errorf("spec has no object schemas")
	}
	doc.Servers = nil
	if err := doc.Validate(context.Background()); err != nil {
		return nil, nil, fmt.Errorf("spec does not validate: %w", err)
	}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, nil, err
	}
	return doc, r, nil
}

type standin struct {
	cfg    standinConfig
	id     string
	router routers.Router

	mu       sync.Mutex
	log      *os.File
	failed   bool
	hung     bool
	state    string // "Not started", "Running", "Paused"
	loaded   bool
	config   map[string]json.RawMessage // pre-boot resources by path
	vsockL   net.Listener
	memMiB   int
	snapshot *standinSnapshot
}

// standinSnapshot is what the stand-in writes as snapshot_path: what a
// real VM state file records of the devices.
type standinSnapshot struct {
	MemMiB int               `json:"mem_mib"`
	Ifaces map[string]string `json:"ifaces"` // iface_id -> host_dev_name
	Vsock  string            `json:"vsock"`
	Drives map[string]string `json:"drives"`
}

func newStandin(cfg standinConfig, id string) (*standin, error) {
	_, r, err := loadSpec(cfg.Spec)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(cfg.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &standin{cfg: cfg, id: id, router: r, log: f, state: infoNotStarted, config: map[string]json.RawMessage{}, memMiB: 128}, nil
}

// resolve maps a path in the jail to the host path it is bound from, and
// whether the jail binds it writable.
func (s *standin) resolve(p string) (string, bool, error) {
	if !filepath.IsAbs(p) {
		return "", false, fmt.Errorf("path %q is not absolute", p)
	}
	first, rest, _ := strings.Cut(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	for _, f := range s.cfg.Files {
		if f.Name != first {
			continue
		}
		if s.cfg.InJail {
			return p, f.Writable, nil
		}
		if rest == "" {
			return f.Source, f.Writable, nil
		}
		return filepath.Join(f.Source, rest), f.Writable, nil
	}
	return "", false, fmt.Errorf("path %q is not in the jail", p)
}

// answer is the stand-in's reply to one request.
type answer struct {
	status int
	body   any
}

func fault(format string, args ...any) answer {
	return answer{http.StatusBadRequest, apiError{FaultMessage: fmt.Sprintf(format, args...)}}
}

var noContent = answer{status: http.StatusNoContent}

func (s *standin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	c := call{Method: r.Method, Path: r.URL.Path, Resolved: map[string]string{}}
	if len(body) > 0 {
		c.Body = json.RawMessage(body)
	}
	var ans answer
	route, params, err := s.router.FindRoute(r)
	switch {
	case err != nil:
		c.Violation = "no such operation in the spec: " + err.Error()
		ans = fault("Invalid request method and/or path: %s %s", r.Method, r.URL.Path)
	case len(body) > 0 && r.Header.Get("Content-Type") != "application/json":
		c.Violation = "body without Content-Type application/json"
		ans = fault("bad content type")
	default:
		in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			c.Violation = "request does not match the spec: " + err.Error()
			ans = fault("An error occurred when deserializing the json body of a request: %v", err)
		} else {
			r.Body = io.NopCloser(bytes.NewReader(body))
			s.mu.Lock()
			if s.cfg.Hang == c.String() && !s.hung {
				s.hung = true
				s.mu.Unlock()
				s.write(c)
				<-r.Context().Done()
				return
			}
			if s.cfg.Fail == c.String() && !s.failed {
				s.failed = true
				ans = fault("stand-in: injected failure of %s", c.String())
				if s.cfg.FailStatus != 0 {
					ans.status = s.cfg.FailStatus // the spec's "default" answer
				}
			} else {
				ans = s.handle(r.Method, r.URL.Path, body, &c)
			}
			s.mu.Unlock()
			// The answer must match the spec too.
			var rb []byte
			if ans.body != nil {
				rb, _ = json.Marshal(ans.body)
			}
			rin := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: ans.status,
				Header:  http.Header{"Content-Type": {"application/json"}},
				Options: &openapi3filter.Options{IncludeResponseStatus: true}}
			rin.SetBodyBytes(rb)
			if err := openapi3filter.ValidateResponse(r.Context(), rin); err != nil {
				c.Violation = "stand-in answer does not match the spec: " + err.Error()
			}
		}
	}
	c.Status = ans.status
	if e, ok := ans.body.(apiError); ok {
		c.Fault = e.FaultMessage
	}
	s.write(c)
	if ans.body == nil {
		w.WriteHeader(ans.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ans.status)
	_ = json.NewEncoder(w).Encode(ans.body)
}

func (s *standin) write(c call) {
	b, _ := json.Marshal(c)
	_, _ = s.log.Write(append(b, '\n'))
}
