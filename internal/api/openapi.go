package api

import (
	"net/http"
	"regexp"
	"strings"
)

// doc describes one route for the OpenAPI document. Every registered route
// needs one (a test walks both ways).
type doc struct {
	summary string
	query   []param
	body    string // schema name, "raw", "tar-or-raw", or ""
	status  string
	resp    string // schema name, "raw", "events", "FileInfo[]", "" for no body
	stream  bool
	alt     []altStatus // further success (or probe) answers besides status
}

// altStatus is another answer a route gives on success.
type altStatus struct{ status, resp, desc string }

type param struct{ name, typ, desc string }

// injectSemantics says where inject rules apply (see FeatureEgressHTTPSInject).
const injectSemantics = "inject rules set the header on plain-HTTP requests to the domain; on HTTPS only where the server enables " +
	"the incubating feature egress_https_inject (the egress proxy then terminates TLS for domains with inject rules with a leaf " +
	"from the deployment's CA, which guests trust, and verifies the upstream); without it TLS to such a domain passes through " +
	"untouched and without the header. TLS to domains without inject rules is never terminated."

var (
	pageParams = []param{{"page_size", "integer", "1-1000, default 50"}, {"page_token", "string", "next_page_token of the previous page"}}
	pathParam  = param{"path", "string", "absolute path in the guest (required)"}
	formatTar  = param{"format", "string", `"tar" moves a directory as a tar stream; default raw bytes of one file`}
)

var docs = map[string]doc{
	"GET /healthz": {summary: "Liveness: the process serves HTTP", status: "200", resp: "Status"},
	"GET /readyz": {summary: "Readiness: the worker can start VMs (a cluster's control plane: its store and its view of the cluster are ready)",
		status: "200", resp: "Status", alt: []altStatus{{"503", "Status", "not ready (the cause is in the server's log)"}}},
	"GET /metrics":      {summary: "Prometheus metrics (text exposition format)", status: "200", resp: "text"},
	"GET /openapi.json": {summary: "This document", status: "200", resp: "OpenAPIDocument"},

	"GET /v1/version": {summary: "The build that serves: version, commit, Go version and API version (no key needed)",
		status: "200", resp: "Version"},
	"GET /v1/features": {summary: "Feature gates and whether they are enabled", status: "200", resp: "FeatureList"},
	"GET /v1/templates": {summary: "List the template builds the caller sees (global ones and its own), by name, oldest build first",
		status: "200", resp: "TemplateList", query: pageParams},
	"POST /v1/templates": {summary: "Build a template (asynchronous: operation type template_build; progress steps resolve source … install, snapshot). " +
		"Visibility: a build made with an admin key is global (every tenant sees and uses it; only admins delete it); " +
		"a build made with a tenant key belongs to that tenant (others get 404). Names are one namespace: building a name " +
		"another owner holds is 409. source.path is a path on the server host under one of its template source roots " +
		"(<data-dir>/imports by default; others are 403 in the operation). A debian source's script runs as root on the " +
		"build host: admin keys only (403). A failed build ends failed with a clear message and leaves no files; " +
		"an unchanged rebuild reuses the existing build (same digest). The build ends by booting the template once and " +
		"keeping its ready snapshot, so sandboxes start from memory.",
		body: "CreateTemplateRequest", status: "202", resp: "TemplateAndOperation"},
	"GET /v1/templates/{name}": {summary: "Get a template: name is its newest ready build (while none is ready, its newest build), " +
		"name@sha256:<hex> exactly that build", status: "200", resp: "Template"},
	"DELETE /v1/templates/{name}": {summary: "Delete every build of a template, or one build (name@sha256:<hex>). 409 while a live sandbox " +
		"or a checkpoint uses it (details: sandboxes, checkpoints) unless force=true; a tenant's force never overrides another " +
		"tenant's use. Global templates: admins only (403). Running sandboxes keep their own disks.",
		status: "204", query: []param{{"force", "boolean", "delete even while sandboxes or checkpoints use it"}}},
	"GET /v1/templates/{name}/builds/{operation}/log": {summary: "A build's log, streamed like command events: NDJSON " +
		"(application/x-ndjson) or SSE with Accept: text/event-stream. Events: {seq,type:\"log\",data|data_b64} one line each, " +
		"then {seq,type:\"end\",state,error?} when the build operation ends; heartbeats while idle. The log is kept after the " +
		"build; reattach with after= the last seq.",
		status: "200", resp: "buildlog", stream: true,
		query: []param{{"after", "integer", "replay lines with seq > after (default 0)"}}},

	"GET /v1/operations": {summary: "List operations, newest first", status: "200", resp: "OperationList",
		query: append([]param{{"target", "string", "only operations on this object (sbx_…, tpl_…)"}}, pageParams...)},
	"GET /v1/operations/{id}": {summary: "Get an operation; with wait, long-poll until it is done or the wait ends (capped at 60s)",
		status: "200", resp: "Operation", query: []param{{"wait", "string", `duration such as "30s" (or seconds)`}}},
	"POST /v1/operations/{id}/cancel": {summary: "Cancel an operation (best effort; pending ones are cancelled for sure)", status: "200", resp: "Operation"},

	"POST /v1/sandboxes": {summary: "Create a sandbox (asynchronous). network is the egress policy {egress:{default,allow,deny},inject:[{domain,header,value}]} " +
		"(absent: deny all). " + injectSemantics + " With from_checkpoint (a ready checkpoint of the tenant) the sandbox is a branch (operation type branch): " +
		"its disk, memory and processes start as they were at the checkpoint, its template and sizes are the checkpoint's " +
		"(the commands that had started in the checkpointed sandbox are command sessions of the branch once it runs, with new ids, " +
		"the same spec and started_at, running or exited as the branch's guest reports them; their events replay the process's output from before the checkpoint too) " +
		"(template, vcpus, memory_mib, disk_mib may be left out; other values are 400); a checkpoint not ready is 409 (details.state).",
		body: "CreateSandboxRequest", status: "202", resp: "SandboxAndOperation"},
	"GET /v1/sandboxes": {summary: "List sandboxes (deleted ones only when asked for by state)", status: "200", resp: "SandboxList",
		query: append([]param{{"state", "string", "comma-separated states"}, {"metadata.KEY", "string", "only sandboxes whose metadata KEY has this value (repeat for several keys)"}}, pageParams...)},
	"GET /v1/sandboxes/{id}":    {summary: "Get a sandbox, with usage (memory file, disk and suspend snapshot bytes on its worker)", status: "200", resp: "Sandbox"},
	"DELETE /v1/sandboxes/{id}": {summary: "Delete a sandbox (asynchronous); 409 while it is in a transition", status: "202", resp: "OperationResponse"},
	"POST /v1/sandboxes/{id}/pause": {summary: "Pause a running sandbox (operation type pause: running -> pausing -> paused): vCPUs stop, " +
		"memory stays resident on the worker; not durable. Another state is 409 with details.state, also when checked again as the operation starts " +
		"(operations on one sandbox run one at a time, in order)", status: "202", resp: "OperationResponse"},
	"POST /v1/sandboxes/{id}/suspend": {summary: "Suspend a running or paused sandbox (operation type suspend: -> suspending -> suspended): a checksummed " +
		"snapshot of memory, device state and disk; the VM is released and the sandbox survives server restarts. Commands keep their state; " +
		"exec, commands and files answer 409 until wake. Another state is 409 with details.state", status: "202", resp: "OperationResponse"},
	"POST /v1/sandboxes/{id}/wake": {summary: "Wake a paused (resume) or suspended (restore) sandbox (operation type wake: -> waking -> running). " +
		"A damaged snapshot fails the operation with data_loss and the sandbox goes failed with last_error. Another state is 409 with details.state",
		status: "202", resp: "OperationResponse"},
	"POST /v1/sandboxes/{id}/keep": {summary: "Set the time to live to timeout_seconds from now (expires_at); an expired sandbox is deleted by a delete operation",
		body: "KeepRequest", status: "200", resp: "Sandbox"},
	"POST /v1/sandboxes/{id}/restore": {summary: "Roll a running, paused or suspended sandbox back in place to a ready checkpoint of it or of a sandbox it was " +
		"branched from (operation type restore: -> waking -> running). Running commands the checkpoint did not have end with reason lost; " +
		"those it had are running or exited as the restored guest reports (a command that ended after the checkpoint runs again); " +
		"commands of a checkpoint of an ancestor that this sandbox has no session for become new sessions of it. " +
		"Another sandbox state or a checkpoint not ready is 409 (details.state); another lineage's checkpoint is 400",
		body: "RestoreRequest", status: "202", resp: "OperationResponse"},
	"POST /v1/sandboxes/{id}/checkpoints": {summary: "Checkpoint a running or paused sandbox (operation type checkpoint, target the sandbox): it keeps running, " +
		"stopped only for the instant of the copy. The checkpoint is creating until the operation ends, then ready or failed. Another state is 409",
		body: "CreateCheckpointRequest", status: "202", resp: "CheckpointAndOperation"},
	"GET /v1/sandboxes/{id}/checkpoints": {summary: "List a sandbox's checkpoints, oldest first (also after the sandbox is deleted)",
		status: "200", resp: "CheckpointList", query: pageParams},
	"GET /v1/checkpoints/{ckpt}": {summary: "Get a checkpoint", status: "200", resp: "Checkpoint"},
	"DELETE /v1/checkpoints/{ckpt}": {summary: "Delete a checkpoint at once (synchronous, 204). Branches made from it and sandboxes restored to it " +
		"keep working. A checkpoint still being created is 409", status: "204"},
	"PUT /v1/sandboxes/{id}/network": {summary: "Replace the egress policy of a running, paused or suspended sandbox; applies at once " +
		"(open connections it no longer allows are closed). " + injectSemantics, body: "NetworkPolicy", status: "200", resp: "Sandbox"},
	"GET /v1/sandboxes/{id}/network/log": {summary: "Egress audit records, oldest first (incubating: feature network_log)",
		status: "200", resp: "NetworkLog"},

	"PUT /v1/secrets/{name}": {summary: "Store a secret (201 new, 200 replaced); write-only: no route returns its value",
		body: "PutSecretRequest", status: "201", resp: "Secret", alt: []altStatus{{"200", "Secret", "an existing secret's value was replaced"}}},
	"GET /v1/secrets":           {summary: "List secrets by name: names and timestamps only", status: "200", resp: "SecretList", query: pageParams},
	"DELETE /v1/secrets/{name}": {summary: "Delete a secret", status: "204"},

	"POST /v1/sandboxes/{id}/commands": {summary: "Create a command session; it starts on the first attach to its events (or the first stdin write)",
		body: "CreateCommandRequest", status: "201", resp: "CommandResponse"},
	"GET /v1/sandboxes/{id}/commands":       {summary: "List a sandbox's commands, oldest first; a branch lists the commands it inherited from its checkpoint (new ids) too", status: "200", resp: "CommandList", query: pageParams},
	"GET /v1/sandboxes/{id}/commands/{cid}": {summary: "Get a command: state, pid, exit status", status: "200", resp: "CommandResponse"},
	"GET /v1/sandboxes/{id}/commands/{cid}/events": {summary: "Attach to a command's events, starting it on the first attach. " +
		"NDJSON (application/x-ndjson), or SSE with Accept: text/event-stream (id: is the seq, so Last-Event-ID resumes). " +
		"The stream ends after the exit event; an error event ends it early.",
		status: "200", resp: "events", stream: true,
		query: []param{{"after", "integer", "replay events with seq > after (default 0)"}}},
	"POST /v1/sandboxes/{id}/commands/{cid}/stdin": {summary: "Write the raw body to the command's stdin (it must have stdin or a pty)",
		body: "raw", status: "204", query: []param{{"eof", "boolean", "close stdin after the body"}}},
	"POST /v1/sandboxes/{id}/commands/{cid}/signal": {summary: "Signal the command's process group", body: "SignalRequest", status: "204"},
	"POST /v1/sandboxes/{id}/commands/{cid}/resize": {summary: "Resize the command's PTY", body: "ResizeRequest", status: "204"},
	"POST /v1/sandboxes/{id}/exec": {summary: "Run a short command to the end; stdout and stderr are capped (1 MiB each by default) and marked truncated",
		body: "ExecRequest", status: "200", resp: "ExecResponse"},

	"PUT /v1/sandboxes/{id}/files": {summary: "Write a file (raw body; parents created) or, with format=tar, unpack a tar stream into a directory",
		body: "tar-or-raw", status: "200", resp: "FileInfo", alt: []altStatus{{"204", "", "format=tar: the tar stream was unpacked"}},
		query: []param{pathParam, {"mode", "string", `octal permission bits, default "0644"`}, formatTar}},
	"GET /v1/sandboxes/{id}/files": {summary: "Read a file (raw body) or, with format=tar, a directory as a tar stream",
		status: "200", resp: "tar-or-raw", query: []param{pathParam, formatTar}},
	"GET /v1/sandboxes/{id}/files/list": {summary: "List a directory", status: "200", resp: "FileInfo[]", query: []param{pathParam}},
	"DELETE /v1/sandboxes/{id}/files": {summary: "Delete a path; a non-empty directory needs recursive=true", status: "204",
		query: []param{pathParam, {"recursive", "boolean", "delete a directory with its contents"}}},

	"POST /v1/admin/tenants":              {summary: "Create a tenant (admin)", body: "CreateTenantRequest", status: "201", resp: "TenantResponse"},
	"GET /v1/admin/tenants":               {summary: "List tenants with their quotas and live sandbox counts (admin)", status: "200", resp: "TenantList"},
	"GET /v1/admin/tenants/{name}/keys":   {summary: "List a tenant's API keys, revoked ones included (admin); never a key or its hash", status: "200", resp: "KeyList"},
	"PUT /v1/admin/tenants/{name}/quotas": {summary: "Set a tenant's quotas (admin): the fields given replace its own, the others stay; 0 is unlimited", body: "SetQuotasRequest", status: "200", resp: "TenantInfoResponse"},
	"POST /v1/admin/tenants/{name}/keys":  {summary: "Create an API key for a tenant (admin); the key is shown only in this answer", body: "CreateKeyRequest", status: "201", resp: "KeyResponse"},
	"DELETE /v1/admin/keys/{id}":          {summary: "Revoke an API key (admin)", status: "204"},
	"GET /v1/admin/workers":               {summary: "List workers (admin)", status: "200", resp: "WorkerList"},
}

var pathParamRE = regexp.MustCompile(`\{([a-z_]+)\}`)

func schemaRef(name string) obj { return obj{"$ref": "#/components/schemas/" + name} }

func content(kind string) obj {
	switch kind {
	case "raw":
		return obj{"application/octet-stream": obj{"schema": obj{"type": "string", "contentMediaType": "application/octet-stream"}}}
	case "tar-or-raw":
		return obj{"application/octet-stream": obj{"schema": obj{"type": "string", "description": "the file's bytes"}},
			"application/x-tar": obj{"schema": obj{"type": "string", "description": "a tar stream of the directory (format=tar)"}}}
	case "events":
		return eventStream("Event")
	case "buildlog":
		return eventStream("BuildLogEvent")
	case "text":
		return obj{"text/plain": obj{"schema": obj{"type": "string"}}}
	case "FileInfo[]":
		return obj{"application/json": obj{"schema": obj{"type": "array", "items": schemaRef("FileInfo")}}}
	}
	return obj{"application/json": obj{"schema": schemaRef(kind)}}
}

// eventStream is the content of a stream of item events. OpenAPI 3.1 has
// no keyword for the items of a sequential media type (3.2's itemSchema),
// so the schema is the text and the x-item-schema extension names each
// line's (NDJSON) or data field's (SSE) schema.
func eventStream(item string) obj {
	ndjson := "Newline-delimited JSON: one " + item + " per line, flushed as it happens"
	sse := "Server-sent events: each event's data is one " + item + " and its id the seq (Last-Event-ID resumes)"
	return obj{
		"application/x-ndjson": obj{"schema": obj{"type": "string", "description": ndjson}, "x-item-schema": schemaRef(item)},
		"text/event-stream":    obj{"schema": obj{"type": "string", "description": sse}, "x-item-schema": schemaRef(item)},
	}
}

// openAPI builds the document from the registered routes and their docs.
func (s *Server) openAPI() obj {
	paths := obj{}
	for _, rt := range s.routes {
		d, ok := docs[rt.pattern]
		if !ok {
			continue // the test fails on this; serve what is documented
		}
		method, p, _ := strings.Cut(rt.pattern, " ")
		p = strings.ReplaceAll(p, "...}", "}") // a {name...} wildcard is one path parameter
		item, _ := paths[p].(obj)
		if item == nil {
			item = obj{}
			paths[p] = item
		}
		item[strings.ToLower(method)] = s.operationDoc(rt, d, p)
	}
	return obj{
		"openapi": "3.1.0",
		"info": obj{"title": "SPACE API", "version": "v1",
			"description": "Sandboxed Platform for Agentic Code Execution. Errors are {\"error\":{code,message,details}}: " +
				"invalid_argument 400 (details.fields names the fields), unauthenticated 401, permission_denied 403, " +
				"not_found 404 (also for other tenants' objects), conflict 409 (wrong state: details.state), " +
				"failed_precondition 412, payload_too_large 413, resource_exhausted 429, internal 500, unavailable 503, deadline_exceeded 504 (408 for a request body that did not arrive in time). " +
				"Every POST accepts Idempotency-Key (remembered 24h per tenant): a repeat with the same method, URI and body " +
				"returns the first answer (header Idempotent-Replayed: true) without acting again; another body is 409. " +
				"Answers 5xx and 429 are not remembered. Every response carries X-Request-Id. " +
				"The reference in prose, with examples, is docs/api.md in the repository."},
		"servers":    []obj{{"url": "/"}},
		"paths":      paths,
		"components": obj{"schemas": componentSchemas(), "securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer"}}},
	}
}

// pathParamDocs describe the path parameters, by name.
var pathParamDocs = map[string]string{
	"id":        "The object's id (sbx_…, op_…, key_…); a malformed, unknown or other tenant's id is 404",
	"cid":       "The command's id (cmd_…)",
	"ckpt":      "The checkpoint's id (ckpt_…)",
	"name":      "The object's name",
	"operation": "The build's template_build operation id (op_…)",
}

// optionalBody are the request bodies a route also takes empty (as {}).
var optionalBody = map[string]bool{"CreateKeyRequest": true, "CreateCheckpointRequest": true}

func (s *Server) operationDoc(rt route, d doc, path string) obj {
	var params []obj
	for _, m := range pathParamRE.FindAllStringSubmatch(path, -1) {
		desc := pathParamDocs[m[1]]
		if m[1] == "name" && strings.HasPrefix(path, "/v1/templates/") {
			desc = "A template name, or name@sha256:<hex> for one build"
		}
		params = append(params, obj{"name": m[1], "in": "path", "required": true, "schema": obj{"type": "string"}, "description": desc})
	}
	for _, q := range d.query {
		p := obj{"name": q.name, "in": "query", "schema": obj{"type": q.typ}, "description": q.desc}
		if q.name == "path" {
			p["required"] = true
		}
		params = append(params, p)
	}
	method, _, _ := strings.Cut(rt.pattern, " ")
	if method == http.MethodPost && rt.auth != authNone {
		params = append(params, obj{"name": "Idempotency-Key", "in": "header", "schema": obj{"type": "string", "maxLength": 255},
			"description": "Remembered 24h per tenant: a repeat with the same method, URI and body gets the first answer " +
				"(Idempotent-Replayed: true) without acting again; another body is 409; 5xx and 429 answers are not remembered"})
	}
	if d.stream {
		params = append(params, obj{"name": "Last-Event-ID", "in": "header", "schema": obj{"type": "string"},
			"description": "SSE resume point; used when after is absent"})
	}
	responses := obj{d.status: response(d.summary, d.resp),
		"default": obj{"description": "An error: see components.schemas.ErrorDetail for the codes", "content": content("Error")}}
	for _, a := range d.alt {
		responses[a.status] = response(a.desc, a.resp)
	}
	op := obj{
		"operationId": operationID(rt.pattern),
		"summary":     d.summary,
		"responses":   responses,
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	if d.body != "" {
		op["requestBody"] = obj{"required": !optionalBody[d.body], "content": content(d.body)}
	}
	if rt.auth != authNone {
		op["security"] = []obj{{"bearer": []string{}}}
	}
	return op
}

func response(desc, kind string) obj {
	r := obj{"description": desc}
	if kind != "" {
		r["content"] = content(kind)
	}
	return r
}

// operationID turns "GET /v1/sandboxes/{id}/files" into "get_sandboxes_id_files".
func operationID(pattern string) string {
	method, p, _ := strings.Cut(pattern, " ")
	p = strings.TrimPrefix(p, "/v1")
	r := strings.NewReplacer("/", "_", "{", "", "}", "", ".", "_")
	return strings.ToLower(method) + strings.TrimRight(r.Replace(p), "_")
}

func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.openAPI())
	return nil
}
