package api

// What the OpenAPI schemas say beyond the wire types' shapes: descriptions,
// enums and limits (the handlers' validation, which is where they live),
// and which request fields a handler insists on. Sandboxes, operations,
// commands and files here; templates, checkpoints, network, secrets and
// admin in openapi_fields_more.go.

// fieldDoc is what the document says of one property.
type fieldDoc struct {
	desc   string
	extra  obj // keywords added to the generated schema (enum, limits, pattern)
	schema obj // replaces the generated schema (json.RawMessage fields)
}

func enum(vals ...string) obj { return obj{"enum": vals} }

// Patterns of the handlers' validation.
const (
	templateRefPattern = `^[a-z0-9][a-z0-9-]{0,62}(@sha256:[0-9a-f]{64})?$`
	metadataKeyPattern = `^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$`
	envKeyPattern      = `^[A-Za-z_][A-Za-z0-9_]{0,255}$`
)

var (
	sandboxStates  = []string{"creating", "running", "pausing", "paused", "suspending", "suspended", "waking", "deleting", "deleted", "failed"}
	opTypes        = []string{"create", "delete", "pause", "suspend", "wake", "checkpoint", "restore", "branch", "template_build"}
	opStates       = []string{"pending", "running", "succeeded", "failed", "cancelled"}
	exitReasons    = []string{"exited", "signaled", "timeout", "killed", "oom", "sandbox_deleted", "lost"}
	nextPageToken  = fieldDoc{desc: "Pass as page_token to get the next page; absent on the last page"}
	envMap         = obj{"maxProperties": maxEnv, "propertyNames": obj{"pattern": envKeyPattern}, "additionalProperties": obj{"type": "string", "maxLength": maxEnvValue}}
	timeoutSeconds = obj{"minimum": 0, "maximum": maxTimeoutSeconds}
	networkOrNull  = obj{"anyOf": []obj{schemaRef("NetworkPolicy"), {"type": "null"}}}
)

// typeDocs describe whole components.
var typeDocs = map[string]string{
	"Error":        "The body of every error answer (4xx, 5xx)",
	"ErrorDetail":  "What went wrong. code is the class (invalid_argument 400, unauthenticated 401, permission_denied 403, not_found 404, conflict 409, failed_precondition 412, payload_too_large 413, resource_exhausted 429, internal 500, unavailable 503, deadline_exceeded 504)",
	"Operation":    "Asynchronous lifecycle work; poll GET /v1/operations/{id} until state is succeeded, failed or cancelled",
	"Progress":     "How far a running operation is",
	"OpError":      "Why an operation or a sandbox failed",
	"Sandbox":      "One microVM with its own root filesystem",
	"Usage":        "What a sandbox occupies on its worker (GET /v1/sandboxes/{id} only). Shared (reflinked) extents count in full, so the numbers are upper bounds",
	"PTY":          "A pseudo-terminal's size",
	"Command":      "A command session: created, then started by the first attach to its events (or the first stdin write)",
	"ExitStatus":   "How a command ended",
	"Event":        "One event of a command's stream (one NDJSON line or one SSE data field). started: seq, pid, time. stdout/stderr: seq, data (UTF-8) or data_b64 (other bytes). gap: seq, lost_bytes (output dropped because the guest's buffer was full). exit: seq, exit_code (null when signaled), signal (null unless signaled), reason. error: code, message (no seq; the stream ends; reattach with after=). heartbeat (NDJSON only, no seq): sent after an idle interval; SSE sends a \": heartbeat\" comment instead",
	"ExecRequest":  "A command run to its end: the fields of CreateCommandRequest plus stdin_data",
	"ExecResponse": "A finished command's exit and output. Output that is not UTF-8 comes in stdout_b64/stderr_b64 (stdout/stderr are then empty)",
	"FileInfo":     "One directory entry or file",
}

// requestRequired are the request bodies' required fields, by component: the
// decoder (strictjson) requires none and refuses unknown ones, so these are
// the fields a handler's validation answers 400 without.
var requestRequired = map[string][]string{
	"CreateSandboxRequest":    nil, // template, unless from_checkpoint (schemaExtra)
	"KeepRequest":             {"timeout_seconds"},
	"CreateCommandRequest":    nil, // argv or shell (schemaExtra)
	"ExecRequest":             nil,
	"PTY":                     {"cols", "rows"},
	"SignalRequest":           {"signal"},
	"ResizeRequest":           {"cols", "rows"},
	"CreateTenantRequest":     {"name"},
	"CreateKeyRequest":        nil,
	"SetQuotasRequest":        nil,
	"CreateTemplateRequest":   {"name", "source"},
	"TemplateSource":          {"type"},
	"TemplateDefaults":        nil,
	"PutSecretRequest":        {"value"},
	"CreateCheckpointRequest": nil,
	"RestoreRequest":          {"checkpoint"},
	"NetworkPolicy":           nil,
	"EgressRules":             nil,
	"InjectRule":              {"domain", "header"},
}

// argvOrShell is the rule of sandbox.ValidateSpec: exactly one of argv and shell.
var argvOrShell = obj{"oneOf": []obj{
	{"required": []string{"argv"}, "not": obj{"required": []string{"shell"}}},
	{"required": []string{"shell"}, "not": obj{"required": []string{"argv"}}},
}}

// schemaExtra are keywords added to whole components.
var schemaExtra = map[string]obj{
	"CreateSandboxRequest": {"anyOf": []obj{{"required": []string{"template"}}, {"required": []string{"from_checkpoint"}}}},
	"CreateCommandRequest": argvOrShell,
	"ExecRequest":          argvOrShell,
	"Event": {"allOf": []obj{
		{"if": obj{"properties": obj{"type": obj{"const": "exit"}}}, "then": obj{"required": []string{"seq", "exit_code", "signal", "reason"}}},
		{"if": obj{"properties": obj{"type": obj{"enum": []string{"started", "stdout", "stderr", "gap"}}}}, "then": obj{"required": []string{"seq"}}},
		{"if": obj{"properties": obj{"type": obj{"const": "error"}}}, "then": obj{"required": []string{"code", "message"}}},
	}},
}

// extraSchemas are components without a wire type of their own.
var extraSchemas = map[string]obj{
	"Status": {"type": "object", "description": "A probe's answer", "required": []string{"status"},
		"properties": obj{"status": obj{"type": "string", "enum": []string{"ok", "ready", "not ready"},
			"description": "ok (healthz), ready or not ready (readyz)"}}},
	"OpenAPIDocument": {"type": "object", "description": "An OpenAPI 3.1 document: this one", "required": []string{"openapi", "info", "paths"}},
}

var fieldDocs = map[string]fieldDoc{
	"Error.error":         {desc: "The error"},
	"ErrorDetail.code":    {desc: "The error class, snake_case", extra: enum("invalid_argument", "unauthenticated", "permission_denied", "not_found", "conflict", "failed_precondition", "payload_too_large", "resource_exhausted", "internal", "unavailable", "deadline_exceeded", "cancelled", "aborted", "data_loss")},
	"ErrorDetail.message": {desc: "For humans; never a host path or a stack trace"},
	"ErrorDetail.details": {desc: "Machine-readable particulars: fields (field -> problem) for invalid_argument, state for conflict, feature for a gated route, limit_bytes for payload_too_large, …", schema: obj{"type": "object"}},

	"Operation.id":                  {desc: "op_… id"},
	"Operation.type":                {desc: "What the operation does", extra: enum(opTypes...)},
	"Operation.target":              {desc: "The object it acts on: sbx_… (sandbox operations, checkpoint) or tpl_… (template_build)"},
	"Operation.state":               {desc: "pending and running move on; succeeded, failed and cancelled are final. An operation a restart interrupted ends failed with code aborted", extra: enum(opStates...)},
	"Operation.progress":            {desc: "Set while it runs (e.g. template builds: resolve source … install, snapshot)"},
	"Operation.error":               {desc: "Why it failed (state failed or cancelled)"},
	"Operation.result":              {desc: "Set when it succeeded: the Sandbox for create, branch, delete, pause, suspend, wake and restore; the Checkpoint for checkpoint; {template, warnings} for template_build", schema: obj{"anyOf": []obj{schemaRef("Sandbox"), schemaRef("Checkpoint"), schemaRef("BuildResult")}}},
	"Operation.created_at":          {desc: "When it was submitted"},
	"Operation.updated_at":          {desc: "When it last changed"},
	"Operation.done_at":             {desc: "When it reached a final state"},
	"Progress.step":                 {desc: "The current step's name"},
	"Progress.percent":              {desc: "0-100", extra: obj{"minimum": 0, "maximum": 100}},
	"OpError.code":                  {desc: "An error class (as ErrorDetail.code), e.g. aborted, data_loss, internal"},
	"OpError.message":               {desc: "For humans"},
	"OperationList.operations":      {desc: "Newest first"},
	"OperationList.next_page_token": nextPageToken,
	"OperationResponse.operation":   {desc: "The operation started"},
	"BuildResult.template":          {desc: "The build, ready"},
	"BuildResult.warnings":          {desc: "What the build noted but did not fail on"},

	"Sandbox.id":                    {desc: "sbx_… id"},
	"Sandbox.template":              {desc: "The template's name"},
	"Sandbox.template_digest":       {desc: "The template build it boots from (sha256:…)"},
	"Sandbox.state":                 {desc: "Lifecycle state; deleted sandboxes are listed only when asked for by state", extra: enum(sandboxStates...)},
	"Sandbox.vcpus":                 {desc: "Virtual CPUs"},
	"Sandbox.memory_mib":            {desc: "Guest RAM in MiB"},
	"Sandbox.disk_mib":              {desc: "Root disk size in MiB as asked (0: not asked); the disk is never smaller than the template image"},
	"Sandbox.metadata":              {desc: "The caller's labels (always an object)"},
	"Sandbox.network":               {desc: "The egress policy; absent: all egress denied", schema: schemaRef("NetworkPolicy")},
	"Sandbox.worker":                {desc: "The worker its VM runs on (a cluster: absent while suspended or not placed)"},
	"Sandbox.created_at":            {desc: "When it was created"},
	"Sandbox.expires_at":            {desc: "When timeout_seconds (or the last keep) ends; it is then deleted"},
	"Sandbox.last_error":            {desc: "Why it failed (state failed)"},
	"Sandbox.usage":                 {desc: "Set by GET /v1/sandboxes/{id} only, when the worker answers at once"},
	"Usage.memory_bytes":            {desc: "The guest RAM's memory file on the worker's disk"},
	"Usage.disk_bytes":              {desc: "What the sandbox's own root disk allocates"},
	"Usage.snapshot_bytes":          {desc: "The suspend snapshot (suspended sandboxes only)"},
	"SandboxList.sandboxes":         {desc: "A page of sandboxes"},
	"SandboxList.next_page_token":   nextPageToken,
	"SandboxAndOperation.sandbox":   {desc: "The new sandbox, state creating"},
	"SandboxAndOperation.operation": {desc: "The create (or branch) operation"},

	"CreateSandboxRequest.template":             {desc: "Template name (newest ready build) or name@sha256:<hex> (that build). Required unless from_checkpoint; with from_checkpoint it may only repeat the checkpoint's template", extra: obj{"pattern": templateRefPattern}},
	"CreateSandboxRequest.vcpus":                {desc: "Default: the template's, else 1. At most the server's limit (8 by default). Not with from_checkpoint", extra: obj{"minimum": 0}},
	"CreateSandboxRequest.memory_mib":           {desc: "128 to the server's limit (16384 by default); default: the template's, else 256. Not with from_checkpoint", extra: obj{"minimum": 0}},
	"CreateSandboxRequest.disk_mib":             {desc: "64 to the server's limit (262144 by default); default: the template's; the disk is at least the template image's size. Not with from_checkpoint", extra: obj{"minimum": 0}},
	"CreateSandboxRequest.env":                  {desc: "Environment of every command (merged over the template's; these win). At most 256 variables, names ^[A-Za-z_][A-Za-z0-9_]*$ up to 256 characters, values up to 32 KiB without NUL", extra: envMap},
	"CreateSandboxRequest.metadata":             {desc: "Labels to filter listings by (metadata.KEY=VALUE). At most 64; keys 1-63 characters of letters, digits and _ . - / (starting with a letter or digit); values up to 256 bytes", extra: obj{"maxProperties": maxMetadata, "propertyNames": obj{"pattern": metadataKeyPattern}, "additionalProperties": obj{"type": "string", "maxLength": maxMetadataValue}}},
	"CreateSandboxRequest.timeout_seconds":      {desc: "Time to live: the sandbox is deleted this long after creation (0: never). At most 30 days", extra: timeoutSeconds},
	"CreateSandboxRequest.idle_timeout_seconds": {desc: "Suspend after this long without command or stream activity (0: never). At most 30 days", extra: timeoutSeconds},
	"CreateSandboxRequest.network":              {desc: "Egress policy. Absent or null: deny all (a branch: its parent's policy)", schema: networkOrNull},
	"CreateSandboxRequest.from_checkpoint":      {desc: "ckpt_… id of a ready checkpoint of the caller: the new sandbox is a branch of it (operation type branch), with its template and sizes"},
	"KeepRequest.timeout_seconds":               {desc: "New time to live from now, 1 to 30 days", extra: obj{"minimum": 1, "maximum": maxTimeoutSeconds}},

	"CreateCommandRequest.argv":            {desc: "Program and arguments (argv[0] without a slash is looked up in the command's PATH). Exactly one of argv and shell", extra: obj{"minItems": 1}},
	"CreateCommandRequest.shell":           {desc: "A command line, run as /bin/sh -c SHELL. Exactly one of argv and shell", extra: obj{"minLength": 1}},
	"CreateCommandRequest.cwd":             {desc: "Absolute working directory (default: the template's workdir, else the user's home when it exists, else /)"},
	"CreateCommandRequest.env":             {desc: "Extra environment (over the sandbox's); same limits as the sandbox's env", extra: envMap},
	"CreateCommandRequest.user":            {desc: "Account to run as (default: the template's user, else root)"},
	"CreateCommandRequest.stdin":           {desc: "Keep stdin open for POST …/stdin (otherwise it is /dev/null)"},
	"CreateCommandRequest.pty":             {desc: "Run on a pseudo-terminal of this size (stdout carries both streams; stdin is open)"},
	"CreateCommandRequest.timeout_seconds": {desc: "Kill the process group this long after start (exit reason timeout); 0: no limit. At most 7 days", extra: obj{"minimum": 0, "maximum": maxCommandTimeout}},
	"ExecRequest.stdin_data":               {desc: "Written to stdin, which is then closed (implies stdin: true)"},
	"PTY.rows":                             {desc: "1-1000", extra: obj{"minimum": 1, "maximum": 1000}},
	"PTY.cols":                             {desc: "1-1000", extra: obj{"minimum": 1, "maximum": 1000}},

	"Command.id":                  {desc: "cmd_… id"},
	"Command.sandbox":             {desc: "The sandbox's id"},
	"Command.argv":                {desc: "As created"},
	"Command.shell":               {desc: "As created"},
	"Command.cwd":                 {desc: "As created"},
	"Command.env":                 {desc: "As created"},
	"Command.user":                {desc: "As created"},
	"Command.stdin":               {desc: "Whether stdin is open"},
	"Command.pty":                 {desc: "As created"},
	"Command.timeout_seconds":     {desc: "As created"},
	"Command.state":               {desc: "created (not started yet), running, exited", extra: enum("created", "running", "exited")},
	"Command.pid":                 {desc: "The process id in the guest, once started"},
	"Command.exit":                {desc: "Set once exited"},
	"Command.created_at":          {desc: "When it was created"},
	"Command.started_at":          {desc: "When it started"},
	"ExitStatus.exit_code":        {desc: "The exit code; null when the process was signaled"},
	"ExitStatus.signal":           {desc: "The signal that ended it (e.g. SIGKILL); null unless signaled"},
	"ExitStatus.reason":           {desc: "exited (ran to its end), signaled (ended by a signal, from …/signal or the guest), timeout (timeout_seconds passed; all it started was killed), killed (SIGKILL from …/signal: all it started was killed), oom (the out-of-memory killer), sandbox_deleted (its sandbox was deleted), lost (the platform lost track of it, e.g. the sandbox was restored to a checkpoint without it)", extra: enum(exitReasons...)},
	"ExitStatus.ended_at":         {desc: "When it ended"},
	"CommandResponse.command":     {desc: "The command"},
	"CommandList.commands":        {desc: "A page of commands, oldest first"},
	"CommandList.next_page_token": nextPageToken,

	"Event.seq":        {desc: "Grows by one per event of the command; pass as after= (or SSE Last-Event-ID) to resume"},
	"Event.type":       {desc: "The event's kind", extra: enum("started", "stdout", "stderr", "gap", "exit", "error", "heartbeat")},
	"Event.time":       {desc: "When it happened in the guest (started, exit)"},
	"Event.pid":        {desc: "The process id (started)"},
	"Event.data":       {desc: "Output bytes that are UTF-8 (stdout, stderr)"},
	"Event.data_b64":   {desc: "Output bytes that are not UTF-8, base64 (stdout, stderr)"},
	"Event.lost_bytes": {desc: "Bytes of output dropped (gap)"},
	"Event.exit_code":  {desc: "As ExitStatus.exit_code (exit; explicit null when signaled)"},
	"Event.signal":     {desc: "As ExitStatus.signal (exit; explicit null unless signaled)"},
	"Event.reason":     {desc: "As ExitStatus.reason (exit)", extra: enum(exitReasons...)},
	"Event.code":       {desc: "Error class (error)"},
	"Event.message":    {desc: "For humans (error)"},

	"ExecResponse.command_id":       {desc: "The command session it ran as (cmd_…)"},
	"ExecResponse.exit_code":        {desc: "As ExitStatus.exit_code"},
	"ExecResponse.signal":           {desc: "As ExitStatus.signal"},
	"ExecResponse.reason":           {desc: "As ExitStatus.reason", extra: enum(exitReasons...)},
	"ExecResponse.stdout":           {desc: "Standard output, when UTF-8; capped (1 MiB by default)"},
	"ExecResponse.stderr":           {desc: "Standard error, when UTF-8; capped (1 MiB by default)"},
	"ExecResponse.stdout_b64":       {desc: "Standard output that is not UTF-8, base64"},
	"ExecResponse.stderr_b64":       {desc: "Standard error that is not UTF-8, base64"},
	"ExecResponse.stdout_truncated": {desc: "Output was dropped (past the cap, or lost by the guest's buffer)"},
	"ExecResponse.stderr_truncated": {desc: "Output was dropped (past the cap, or lost by the guest's buffer)"},
	"SignalRequest.signal":          {desc: `A signal name ("SIGTERM", "TERM", "kill") or number (1-64), at most 16 characters; sent to the process group`, extra: obj{"maxLength": 16}},
	"ResizeRequest.rows":            {desc: "1-1000", extra: obj{"minimum": 1, "maximum": 1000}},
	"ResizeRequest.cols":            {desc: "1-1000", extra: obj{"minimum": 1, "maximum": 1000}},

	"FileInfo.name":  {desc: "The entry's name (the file's base name for a PUT)"},
	"FileInfo.type":  {desc: "Kind of entry", extra: enum("file", "dir", "symlink", "other")},
	"FileInfo.size":  {desc: "Size in bytes"},
	"FileInfo.mode":  {desc: `Octal permission bits, e.g. "0644"`},
	"FileInfo.mtime": {desc: "Last modification"},
}
