package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/keylock"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker"
)

// teardownTimeout bounds cleanup that must run even when the operation's
// context is cancelled.
const teardownTimeout = 2 * time.Minute

// Config is the service's behaviour. Zero values take the documented
// defaults.
type Config struct {
	// Sizes of a sandbox (and of a template's ready snapshot) when neither
	// the request nor the template's defaults name one (see Size).
	DefaultVCPUs     int // default 1
	DefaultMemoryMiB int // default 256
	// WorkerID names the worker in the records of sandboxes created
	// (default "local").
	WorkerID string
	// ActivityFlush bounds how stale last_activity_at gets in the store
	// (default DefaultActivityFlush).
	ActivityFlush time.Duration
}

// Deps are the parts the service drives.
type Deps struct {
	Store  store.Store
	Ops    *operation.Engine
	Worker worker.Worker
	Logger *slog.Logger
	// RequestID names the request a context belongs to, for logs (nil:
	// none).
	RequestID func(ctx context.Context) string
	// Templates builds templates (see TemplateDeps); LogDir defaults to
	// <tmp>/space-build-logs.
	Templates TemplateDeps
}

// Service moves sandboxes through their state machine on a worker: it runs
// the lifecycle, checkpoint, restore and branch operations, keeps the
// store and the worker agreeing (Reconcile, Run), suspends idle sandboxes,
// deletes expired ones, and keeps command sessions.
type Service struct {
	cfg       Config
	store     store.Store
	ops       *operation.Engine
	worker    worker.Worker
	logger    *slog.Logger
	requestID func(ctx context.Context) string
	// life tracks activity for idle expiry.
	life *lifecycleState
	// cmdLocks serialises the start of a command (first attach).
	cmdLocks keylock.Map
	// templates builds templates; buildLogs keeps their logs.
	templates TemplateDeps
	buildLogs *buildLogs
	// portLog is the port audit log (portlog.go).
	portLog portLog
}

// New builds the service. Register its Handlers with the operation engine
// (converting their results for the record), then run Reconcile after the
// engine's Recover, and Run for exit watching and expiry.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Store == nil || deps.Ops == nil || deps.Worker == nil {
		return nil, fmt.Errorf("sandbox: Store, Ops and Worker are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.RequestID == nil {
		deps.RequestID = func(context.Context) string { return "" }
	}
	if cfg.DefaultVCPUs <= 0 {
		cfg.DefaultVCPUs = 1
	}
	if cfg.DefaultMemoryMiB <= 0 {
		cfg.DefaultMemoryMiB = 256
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = "local"
	}
	if cfg.ActivityFlush <= 0 {
		cfg.ActivityFlush = DefaultActivityFlush
	}
	if deps.Templates.LogDir == "" {
		deps.Templates.LogDir = filepath.Join(os.TempDir(), "space-build-logs")
	}
	return &Service{cfg: cfg, store: deps.Store, ops: deps.Ops, worker: deps.Worker, logger: deps.Logger,
		requestID: deps.RequestID, life: newLifecycleState(),
		templates: deps.Templates, buildLogs: &buildLogs{dir: deps.Templates.LogDir}}, nil
}

// Status is a sandbox with what its worker reported of it (nil when it did
// not say).
type Status struct {
	Sandbox *store.Sandbox
	Worker  *worker.SandboxStatus
}

// Handlers are the operation handlers of the sandbox verbs and of template
// builds. Their results are domain values: a *store.Sandbox (create,
// branch, delete), a Status (pause, suspend, wake, restore), a
// *store.Checkpoint (checkpoint) or a BuildResult (template_build).
func (s *Service) Handlers() map[store.OperationType]operation.Handler {
	return map[store.OperationType]operation.Handler{
		store.OpCreate: s.runCreate,
		store.OpBranch: s.runCreate,
		store.OpDelete: s.runDelete,
		store.OpPause: s.runTransition(RuleOf(Pause), func(ctx context.Context, op *store.Operation) (worker.SandboxStatus, error) {
			return s.worker.PauseSandbox(ctx, op.Target)
		}),
		store.OpSuspend: s.runSuspend(), // drain.go

		store.OpWake: s.runTransition(RuleOf(Wake), func(ctx context.Context, op *store.Operation) (worker.SandboxStatus, error) {
			return s.worker.WakeSandbox(ctx, op.Target)
		}),
		store.OpRestore:       s.runTransition(RuleOf(Restore), s.restoreOnWorker),
		store.OpCheckpoint:    s.runCheckpoint,
		store.OpTemplateBuild: s.runTemplateBuild,
	}
}

// Agent returns the guest of a sandbox, whose errors carry only the
// classes a guest may choose (guest.go).
func (s *Service) Agent(ctx context.Context, sandboxID string) (worker.Guest, error) {
	g, err := s.worker.Agent(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	return guard(g), nil
}

// TemplateRef is the template build a sandbox boots from.
func TemplateRef(sb *store.Sandbox) template.Ref {
	return template.Ref{Name: sb.Template, Digest: sb.TemplateDigest}
}

// CauseString renders err including the internal cause of a Public error,
// which Error() deliberately hides. For logs only.
func CauseString(err error) string {
	var pub *errdefs.Public
	if errors.As(err, &pub) && pub.Cause != nil {
		return err.Error() + ": " + pub.Cause.Error()
	}
	return err.Error()
}
