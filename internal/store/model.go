package store

import (
	"encoding/json"
	"time"
)

// Quota limits what one tenant may hold at once. A zero field means unlimited.
// Every sandbox that is not deleted or failed counts, suspended ones included:
// a suspended sandbox can wake at any time and must then fit.
type Quota struct {
	MaxSandboxes int `json:"max_sandboxes"`
	MaxVCPUs     int `json:"max_vcpus"`
	MaxMemoryMiB int `json:"max_memory_mib"`
}

// Tenant owns API keys and everything they create.
type Tenant struct {
	ID        string    `json:"id"` // "ten_…"
	Name      string    `json:"name"`
	Quota     Quota     `json:"quota"`
	CreatedAt time.Time `json:"created_at"`
}

// APIKey is a stored API key. The secret itself is never stored: keys are 32
// random bytes, so a single fast SHA-256 is a sound hash (there is nothing to
// brute-force that a slow KDF would protect, unlike a human password).
type APIKey struct {
	ID        string     `json:"id"` // "key_…"
	TenantID  string     `json:"tenant_id"`
	Prefix    string     `json:"prefix"` // first characters of the secret, for display
	Hash      string     `json:"-"`      // hex sha256 of the secret
	Admin     bool       `json:"admin"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// SandboxState is a sandbox's lifecycle state.
type SandboxState string

// Sandbox states (docs/api.md, "Sandbox states").
const (
	SandboxCreating   SandboxState = "creating"
	SandboxRunning    SandboxState = "running"
	SandboxPausing    SandboxState = "pausing"
	SandboxPaused     SandboxState = "paused"
	SandboxSuspending SandboxState = "suspending"
	SandboxSuspended  SandboxState = "suspended"
	SandboxWaking     SandboxState = "waking"
	SandboxDeleting   SandboxState = "deleting"
	SandboxDeleted    SandboxState = "deleted"
	SandboxFailed     SandboxState = "failed"
)

// Live reports whether a sandbox in state s counts against its tenant's quota.
func (s SandboxState) Live() bool { return s != SandboxDeleted && s != SandboxFailed }

// ErrorInfo is an error as the API shows it: a class code and a tenant-safe message.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Sandbox is one sandbox's control-plane record.
type Sandbox struct {
	ID                 string            `json:"id"` // "sbx_…"
	TenantID           string            `json:"tenant_id"`
	Template           string            `json:"template"`
	TemplateDigest     string            `json:"template_digest"`
	State              SandboxState      `json:"state"`
	VCPUs              int               `json:"vcpus"`
	MemoryMiB          int               `json:"memory_mib"`
	DiskMiB            int               `json:"disk_mib"`
	Env                map[string]string `json:"env,omitempty"`
	Metadata           map[string]string `json:"metadata"`
	Network            json.RawMessage   `json:"network,omitempty"`
	Worker             string            `json:"worker,omitempty"`
	TimeoutSeconds     int               `json:"timeout_seconds,omitempty"`
	IdleTimeoutSeconds int               `json:"idle_timeout_seconds,omitempty"`
	CreatedAt          time.Time         `json:"created_at"`
	UpdatedAt          time.Time         `json:"updated_at"`
	ExpiresAt          *time.Time        `json:"expires_at,omitempty"`
	LastActivityAt     time.Time         `json:"last_activity_at"`
	LastError          *ErrorInfo        `json:"last_error,omitempty"`
}

// OperationType names the kind of lifecycle work an operation does.
type OperationType string

// Operation types (docs/api.md, "Operations").
const (
	OpCreate        OperationType = "create"
	OpDelete        OperationType = "delete"
	OpPause         OperationType = "pause"
	OpSuspend       OperationType = "suspend"
	OpWake          OperationType = "wake"
	OpCheckpoint    OperationType = "checkpoint"
	OpRestore       OperationType = "restore"
	OpBranch        OperationType = "branch"
	OpTemplateBuild OperationType = "template_build"
)

// OperationState is an operation's state.
type OperationState string

// Operation states.
const (
	OpPending   OperationState = "pending"
	OpRunning   OperationState = "running"
	OpSucceeded OperationState = "succeeded"
	OpFailed    OperationState = "failed"
	OpCancelled OperationState = "cancelled"
)

// Terminal reports whether an operation in state s is done for good.
func (s OperationState) Terminal() bool {
	return s == OpSucceeded || s == OpFailed || s == OpCancelled
}

// Progress is how far a running operation has come.
type Progress struct {
	Step    string `json:"step"`
	Percent int    `json:"percent"`
}

// Operation is asynchronous lifecycle work on one target.
type Operation struct {
	ID        string          `json:"id"` // "op_…"
	TenantID  string          `json:"tenant_id"`
	Type      OperationType   `json:"type"`
	Target    string          `json:"target"` // "sbx_…" | "tpl_…"
	State     OperationState  `json:"state"`
	Progress  *Progress       `json:"progress,omitempty"`
	Error     *ErrorInfo      `json:"error,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"` // handler input; internal
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	DoneAt    *time.Time      `json:"done_at,omitempty"`
	// LeaseOwner names the control replica that holds the operation (empty:
	// none) until LeaseExpiresAt, a time on the store's clock (zero: none).
	// Only the lease methods change them; internal, never shown.
	LeaseOwner     string    `json:"-"`
	LeaseExpiresAt time.Time `json:"-"`
}

// CommandState is a command session's state.
type CommandState string

// Command states.
const (
	CommandCreated CommandState = "created"
	CommandRunning CommandState = "running"
	CommandExited  CommandState = "exited"
)

// Command is a command session in a sandbox.
type Command struct {
	ID        string `json:"id"` // "cmd_…"
	TenantID  string `json:"tenant_id"`
	SandboxID string `json:"sandbox_id"`
	// ProcessID is the id the guest agent knows the command's process by
	// (agentproto.ProcessSpec.ID). It is the command's own ID, except for a
	// command a branch inherited from its checkpoint: the agent in the
	// branch still knows that process by the parent's command id. It never
	// changes after CreateCommand, which defaults it to ID.
	ProcessID string          `json:"process_id"`
	Spec      json.RawMessage `json:"spec"`
	State     CommandState    `json:"state"`
	PID       int             `json:"pid,omitempty"`
	Exit      json.RawMessage `json:"exit,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	StartedAt *time.Time      `json:"started_at,omitempty"`
}

// IdempotencyRecord remembers the first answer to a POST with an
// Idempotency-Key. Status 0 means the first request is still in progress.
type IdempotencyRecord struct {
	TenantID    string    `json:"tenant_id"`
	Key         string    `json:"key"`
	RequestHash string    `json:"request_hash"`
	Status      int       `json:"status"`
	Body        []byte    `json:"body"`
	CreatedAt   time.Time `json:"created_at"`
}

// TemplateState is a template build's state.
type TemplateState string

// Template states.
const (
	TemplateBuilding TemplateState = "building"
	TemplateReady    TemplateState = "ready"
	TemplateFailed   TemplateState = "failed"
)

// Template is one build of a named template.
type Template struct {
	ID   string `json:"id"` // "tpl_…"
	Name string `json:"name"`
	// TenantID owns the build; empty means every tenant sees it (the
	// built-in templates and admins' builds).
	TenantID  string          `json:"tenant_id,omitempty"`
	Digest    string          `json:"digest"` // "sha256:…"
	State     TemplateState   `json:"state"`
	SizeBytes int64           `json:"size_bytes"`
	Defaults  json.RawMessage `json:"defaults,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// Usage is what a tenant holds now, as counted against its Quota.
type Usage struct {
	Sandboxes int `json:"sandboxes"`
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memory_mib"`
}
