// Package apiv1 holds the wire types of SPACE's public HTTP API (v1): what the
// server writes and the Go client reads. It has no behaviour and imports
// nothing of the server, so clients can depend on it alone.
package apiv1

import (
	"encoding/json"
	"time"
)

// ErrorBody is the body of every non-2xx answer.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is the error object: Code is an errdefs code such as "not_found".
type Error struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// Operation states.
const (
	OpPending   = "pending"
	OpRunning   = "running"
	OpSucceeded = "succeeded"
	OpFailed    = "failed"
	OpCancelled = "cancelled"
)

// Operation is asynchronous lifecycle work.
type Operation struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Target    string          `json:"target"`
	State     string          `json:"state"`
	Progress  *Progress       `json:"progress,omitempty"`
	Error     *OpError        `json:"error,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	DoneAt    *time.Time      `json:"done_at,omitempty"`
}

// Done reports whether the operation reached a terminal state.
func (o Operation) Done() bool {
	return o.State == OpSucceeded || o.State == OpFailed || o.State == OpCancelled
}

// Progress of a running operation.
type Progress struct {
	Step    string `json:"step"`
	Percent int    `json:"percent"`
}

// OpError is why an operation failed.
type OpError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// OperationList is a page of operations, newest first.
type OperationList struct {
	Operations    []Operation `json:"operations"`
	NextPageToken string      `json:"next_page_token,omitempty"`
}

// Sandbox states.
const (
	SandboxCreating   = "creating"
	SandboxRunning    = "running"
	SandboxPausing    = "pausing"
	SandboxPaused     = "paused"
	SandboxSuspending = "suspending"
	SandboxSuspended  = "suspended"
	SandboxWaking     = "waking"
	SandboxDeleting   = "deleting"
	SandboxDeleted    = "deleted"
	SandboxFailed     = "failed"
)

// Sandbox is one microVM with its own root filesystem.
type Sandbox struct {
	ID             string            `json:"id"`
	Template       string            `json:"template"`
	TemplateDigest string            `json:"template_digest,omitempty"`
	State          string            `json:"state"`
	VCPUs          int               `json:"vcpus"`
	MemoryMiB      int               `json:"memory_mib"`
	DiskMiB        int               `json:"disk_mib"`
	Metadata       map[string]string `json:"metadata"`
	Network        json.RawMessage   `json:"network,omitempty"`
	Worker         string            `json:"worker,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	ExpiresAt      *time.Time        `json:"expires_at,omitempty"`
	LastError      *OpError          `json:"last_error,omitempty"`
	// Usage is set by GET /v1/sandboxes/{id} only.
	Usage *Usage `json:"usage,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Template           string            `json:"template"`
	VCPUs              int               `json:"vcpus,omitempty"`
	MemoryMiB          int               `json:"memory_mib,omitempty"`
	DiskMiB            int               `json:"disk_mib,omitempty"`
	Env                map[string]string `json:"env,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	TimeoutSeconds     int               `json:"timeout_seconds,omitempty"`
	IdleTimeoutSeconds int               `json:"idle_timeout_seconds,omitempty"`
	Network            json.RawMessage   `json:"network,omitempty"`
	FromCheckpoint     string            `json:"from_checkpoint,omitempty"`
}

// SandboxAndOperation answers POST /v1/sandboxes.
type SandboxAndOperation struct {
	Sandbox   Sandbox   `json:"sandbox"`
	Operation Operation `json:"operation"`
}

// OperationResponse answers lifecycle calls that start an operation.
type OperationResponse struct {
	Operation Operation `json:"operation"`
}

// SandboxList is a page of sandboxes.
type SandboxList struct {
	Sandboxes     []Sandbox `json:"sandboxes"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}

// KeepRequest is the body of POST /v1/sandboxes/{id}/keep.
type KeepRequest struct {
	TimeoutSeconds int `json:"timeout_seconds"`
}

// PTY asks for a pseudo-terminal.
type PTY struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// CreateCommandRequest is the body of POST /v1/sandboxes/{id}/commands.
// Exactly one of Argv and Shell is set.
type CreateCommandRequest struct {
	Argv           []string          `json:"argv,omitempty"`
	Shell          string            `json:"shell,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	User           string            `json:"user,omitempty"`
	Stdin          bool              `json:"stdin,omitempty"`
	PTY            *PTY              `json:"pty,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec.
type ExecRequest struct {
	CreateCommandRequest
	// StdinData is written to the command's stdin, which is then closed.
	StdinData string `json:"stdin_data,omitempty"`
}

// Command states.
const (
	CommandCreated = "created" // stored, starts on the first attach to its events
	CommandRunning = "running"
	CommandExited  = "exited"
)

// Command is a command session.
type Command struct {
	ID             string            `json:"id"`
	Sandbox        string            `json:"sandbox"`
	Argv           []string          `json:"argv,omitempty"`
	Shell          string            `json:"shell,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	User           string            `json:"user,omitempty"`
	Stdin          bool              `json:"stdin"`
	PTY            *PTY              `json:"pty,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	State          string            `json:"state"`
	PID            int               `json:"pid,omitempty"`
	Exit           *ExitStatus       `json:"exit,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	StartedAt      *time.Time        `json:"started_at,omitempty"`
}

// ExitStatus is how a command ended. ExitCode is null when it was signaled.
type ExitStatus struct {
	ExitCode *int       `json:"exit_code"`
	Signal   *string    `json:"signal"`
	Reason   string     `json:"reason"`
	EndedAt  *time.Time `json:"ended_at,omitempty"`
}

// CommandResponse wraps one command.
type CommandResponse struct {
	Command Command `json:"command"`
}

// CommandList lists a sandbox's commands, newest first.
type CommandList struct {
	Commands      []Command `json:"commands"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}

// Event types of a command's event stream.
const (
	EventStarted   = "started"
	EventStdout    = "stdout"
	EventStderr    = "stderr"
	EventGap       = "gap"
	EventExit      = "exit"
	EventError     = "error"
	EventHeartbeat = "heartbeat"
)

// Event is one line of a command's event stream. Which fields are present
// depends on Type; see the OpenAPI document.
type Event struct {
	Seq       uint64     `json:"seq,omitempty"`
	Type      string     `json:"type"`
	Time      *time.Time `json:"time,omitempty"`
	PID       int        `json:"pid,omitempty"`
	Data      *string    `json:"data,omitempty"`
	DataB64   []byte     `json:"data_b64,omitempty"`
	LostBytes int64      `json:"lost_bytes,omitempty"`
	// Exit events carry these three; exit_code and signal are explicit nulls
	// when absent, so they are written by MarshalJSON.
	ExitCode *int    `json:"exit_code,omitempty"`
	Signal   *string `json:"signal,omitempty"`
	Reason   string  `json:"reason,omitempty"`
	// Error events carry these.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// MarshalJSON writes exit events with explicit null exit_code/signal.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	if e.Type != EventExit {
		return json.Marshal(plain(e))
	}
	return json.Marshal(struct {
		Seq      uint64     `json:"seq"`
		Type     string     `json:"type"`
		Time     *time.Time `json:"time,omitempty"`
		ExitCode *int       `json:"exit_code"`
		Signal   *string    `json:"signal"`
		Reason   string     `json:"reason"`
	}{e.Seq, e.Type, e.Time, e.ExitCode, e.Signal, e.Reason})
}

// Bytes returns the output bytes of a stdout/stderr event.
func (e Event) Bytes() []byte {
	if e.Data != nil {
		return []byte(*e.Data)
	}
	return e.DataB64
}

// ExecResponse answers POST /v1/sandboxes/{id}/exec. Output that is not
// UTF-8 comes in StdoutB64/StderrB64 instead of Stdout/Stderr.
type ExecResponse struct {
	CommandID       string  `json:"command_id"`
	ExitCode        *int    `json:"exit_code"`
	Signal          *string `json:"signal"`
	Reason          string  `json:"reason"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutB64       []byte  `json:"stdout_b64,omitempty"`
	StderrB64       []byte  `json:"stderr_b64,omitempty"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
}

// SignalRequest is the body of POST …/signal.
type SignalRequest struct {
	Signal string `json:"signal"`
}

// ResizeRequest is the body of POST …/resize.
type ResizeRequest struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// FileInfo is one entry of GET …/files/list (which answers a JSON array of
// them) and the answer of a file PUT.
type FileInfo struct {
	Name  string    `json:"name"`
	Type  string    `json:"type"` // file|dir|symlink|other
	Size  int64     `json:"size"`
	Mode  string    `json:"mode"` // octal permission bits, e.g. "0644"
	MTime time.Time `json:"mtime"`
}

// Feature is one feature gate.
type Feature struct {
	Name        string `json:"name"`
	Enabled     bool   `json:"enabled"`
	Stage       string `json:"stage"` // incubating|stable
	Description string `json:"description"`
}

// FeatureList answers GET /v1/features.
type FeatureList struct {
	Features []Feature `json:"features"`
}

// Version answers GET /v1/version: which build of SPACE serves.
type Version struct {
	// Version is the release (set at link time) or the module version;
	// "devel" for a build that says neither.
	Version string `json:"version"`
	// Commit is the source revision; "unknown" when the build did not
	// record it.
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
	// API is the HTTP API version served ("v1").
	API string `json:"api"`
}

// Tenant is an isolated owner of objects.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateTenantRequest is the body of POST /v1/admin/tenants.
type CreateTenantRequest struct {
	Name string `json:"name"`
}

// TenantResponse wraps a tenant.
type TenantResponse struct {
	Tenant Tenant `json:"tenant"`
}

// CreateKeyRequest is the (optional) body of POST /v1/admin/tenants/{name}/keys.
type CreateKeyRequest struct {
	Admin bool `json:"admin,omitempty"`
	// Format is "space" (default) or "e2b" (e2b_<hex>, the form E2B's
	// Python SDK accepts).
	Format string `json:"format,omitempty"`
}

// KeyResponse carries a new API key; Key is shown only this once.
type KeyResponse struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Key       string    `json:"key"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
}

// Worker is a host that runs sandboxes: in a cluster a worker node, on a
// single node the one local worker.
type Worker struct {
	Name string `json:"name"`
	// State is WorkerReady or WorkerNotReady.
	State string `json:"state"`
	// Capacity is what the worker offers sandboxes (absent on a single node).
	Capacity *WorkerResources `json:"capacity,omitempty"`
	// Allocated is what the sandboxes on it take (in a cluster, as the
	// scheduler counts it: memory includes each VMM's overhead).
	Allocated WorkerResources `json:"allocated"`
	// Address is the worker protocol's address (absent on a single node).
	Address string `json:"address,omitempty"`
	// Error says why a worker is not ready, when it can say.
	Error string `json:"error,omitempty"`
	// Simulated: a simulated worker (--simulate, no VMs, docs/simulate.md).
	Simulated bool `json:"simulated,omitempty"`
}

// Worker states.
const (
	WorkerReady    = "ready"
	WorkerNotReady = "not_ready"
)

// WorkerResources are vCPUs, memory and a count of sandboxes.
type WorkerResources struct {
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memory_mib"`
	Sandboxes int `json:"sandboxes"`
}

// WorkerList answers GET /v1/admin/workers.
type WorkerList struct {
	Workers []Worker `json:"workers"`
}

// Template is a root filesystem plus runtime defaults: one build of a
// named template. Digest is empty until the build is ready.
type Template struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Digest    string          `json:"digest,omitempty"`
	State     string          `json:"state"`
	SizeBytes int64           `json:"size_bytes"`
	Defaults  json.RawMessage `json:"defaults,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	// Scope is "global" (built in or built by an admin: every tenant sees
	// it) or "tenant" (seen and used only by the tenant that built it).
	Scope string `json:"scope"`
}

// Template states.
const (
	TemplateBuilding = "building"
	TemplateReady    = "ready"
	TemplateFailed   = "failed"
)

// TemplateSource says what a template is built from.
// Template source types.
const (
	SourceOCI    = "oci"
	SourceDebian = "debian"
	SourceRootfs = "rootfs"
)

type TemplateSource struct {
	// Type is SourceOCI, SourceDebian or SourceRootfs.
	Type string `json:"type"`
	// Path is a path on the server host under one of its template source
	// roots: an OCI image layout dir or a `docker save`/OCI tar (oci), a
	// tar or a directory (rootfs).
	Path string `json:"path,omitempty"`
	// Image is a registry reference (oci), pulled for linux/amd64.
	Image string `json:"image,omitempty"`
	// Suite, Variant, Packages and Script describe a debian build
	// (mmdebstrap); Script runs inside the image at build time and is
	// accepted from admin keys only.
	Suite    string   `json:"suite,omitempty"`
	Variant  string   `json:"variant,omitempty"`
	Packages []string `json:"packages,omitempty"`
	Script   string   `json:"script,omitempty"`
}

// TemplateDefaults are what a sandbox of the template gets when its request
// does not say: sizes, environment, and the working directory and user of
// its commands.
type TemplateDefaults struct {
	VCPUs        int               `json:"vcpus,omitempty"`
	MemoryMiB    int               `json:"memory_mib,omitempty"`
	DiskMiB      int               `json:"disk_mib,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Workdir      string            `json:"workdir,omitempty"`
	User         string            `json:"user,omitempty"`
	StartCommand []string          `json:"start_command,omitempty"`
	ReadyCommand []string          `json:"ready_command,omitempty"`
}

// CreateTemplateRequest is the body of POST /v1/templates.
type CreateTemplateRequest struct {
	Name     string            `json:"name"`
	Source   TemplateSource    `json:"source"`
	Defaults *TemplateDefaults `json:"defaults,omitempty"`
	// NoCache rebuilds even when a build from the same inputs exists.
	NoCache bool `json:"no_cache,omitempty"`
}

// TemplateAndOperation answers POST /v1/templates.
type TemplateAndOperation struct {
	Template  Template  `json:"template"`
	Operation Operation `json:"operation"`
}

// BuildLogEvent is one event of a template build's log stream: "log"
// (seq, data: one line with its newline, or data_b64), "end" (seq, state
// of the build operation, error when it failed) or "error" (code,
// message; the stream broke: reattach with after=).
type BuildLogEvent struct {
	Seq     uint64   `json:"seq,omitempty"`
	Type    string   `json:"type"`
	Data    *string  `json:"data,omitempty"`
	DataB64 []byte   `json:"data_b64,omitempty"`
	State   string   `json:"state,omitempty"`
	Error   *OpError `json:"error,omitempty"`
	Code    string   `json:"code,omitempty"`
	Message string   `json:"message,omitempty"`
}

// Build log event types.
const (
	BuildLogLine  = "log"
	BuildLogEnd   = "end"
	BuildLogError = "error"
)

// TemplateList answers GET /v1/templates.
type TemplateList struct {
	Templates     []Template `json:"templates"`
	NextPageToken string     `json:"next_page_token,omitempty"`
}
