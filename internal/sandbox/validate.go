package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/errdefs"
)

// What a request of any edge may ask of a sandbox, a command or a file:
// the rules are the domain's, so that /v1 and the E2B API refuse the same
// requests with the same invalid_argument error, naming the field (the
// field names are /v1's: details.fields maps each to its reason).

// Patterns and bounds of the values the rules check.
const (
	MetadataKeyPattern = `^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$`
	EnvKeyPattern      = `^[A-Za-z_][A-Za-z0-9_]{0,255}$`
	MaxMetadata        = 64
	MaxMetadataValue   = 256
	MaxEnv             = 256
	MaxEnvValue        = 32 << 10
	// MaxTimeoutSeconds bounds a sandbox's time to live and idle timeout.
	MaxTimeoutSeconds = 30 * 24 * 3600
	// MaxCommandTimeout bounds a command's timeout.
	MaxCommandTimeout = 7 * 24 * 3600
	// MaxPathLen is Linux's PATH_MAX: the guest could not open a longer path.
	MaxPathLen = 4096
	// MaxPTY bounds a terminal's rows and columns.
	MaxPTY = 1000
)

var (
	metadataKeyRE = regexp.MustCompile(MetadataKeyPattern)
	envKeyRE      = regexp.MustCompile(EnvKeyPattern)
)

// ValidMetadataKey reports whether k may be a metadata key (and a
// checkpoint's name, which follows the same rule).
func ValidMetadataKey(k string) bool { return metadataKeyRE.MatchString(k) }

// Invalid is the invalid_argument error of a field -> reason map, in
// details.fields; its message names the field when there is one.
func Invalid(fields map[string]string) error {
	msg := "invalid request"
	if len(fields) == 1 {
		for f, why := range fields {
			msg = f + ": " + why
		}
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "%s", msg).WithDetails(map[string]any{"fields": fields})
}

// NoNUL notes in fields that the value of field holds a NUL byte and
// reports whether it holds none. Every string that ends up as an execve
// argument, an environment entry or a path is checked: the kernel cannot
// take a NUL there, and its refusal deep in the guest or the build host
// would reach the caller as a server error instead of a 400 naming the
// field.
func NoNUL(fields map[string]string, field, v string) bool {
	if strings.IndexByte(v, 0) < 0 {
		return true
	}
	fields[field] = "must not contain a NUL byte"
	return false
}

// NoNULs is NoNUL for each element of a list, named field[i].
func NoNULs(fields map[string]string, field string, vs []string) {
	for i, v := range vs {
		NoNUL(fields, field+"["+strconv.Itoa(i)+"]", v)
	}
}

// EnvFields checks environment variable names and sizes into fields.
func EnvFields(env map[string]string, fields map[string]string) {
	if len(env) > MaxEnv {
		fields["env"] = fmt.Sprintf("at most %d variables", MaxEnv)
	}
	for k, v := range env {
		if !envKeyRE.MatchString(k) {
			fields["env."+k] = "must be a name of letters, digits and _ not starting with a digit"
		} else if len(v) > MaxEnvValue || strings.ContainsRune(v, 0) {
			fields["env."+k] = "value too long or holds a NUL byte"
		}
	}
}

// SizeFields checks a requested size (0: the default) against the
// service's limits into fields, each named prefix+"vcpus" and so on.
func (s *Service) SizeFields(prefix string, sz Size, fields map[string]string) {
	if sz.VCPUs < 0 || sz.VCPUs > s.cfg.MaxVCPUs {
		fields[prefix+"vcpus"] = fmt.Sprintf("must be between 1 and %d", s.cfg.MaxVCPUs)
	}
	if sz.MemoryMiB != 0 && (sz.MemoryMiB < 128 || sz.MemoryMiB > s.cfg.MaxMemoryMiB) {
		fields[prefix+"memory_mib"] = fmt.Sprintf("must be between 128 and %d", s.cfg.MaxMemoryMiB)
	}
	if sz.DiskMiB != 0 && (sz.DiskMiB < 64 || sz.DiskMiB > s.cfg.MaxDiskMiB) {
		fields[prefix+"disk_mib"] = fmt.Sprintf("must be between 64 and %d", s.cfg.MaxDiskMiB)
	}
}

// ValidateCreate checks a create or branch request into fields (the
// edge's own findings, e.g. a template reference that did not parse; nil:
// none) and answers Invalid when any field is wrong. It compacts the
// network policy in req.
func (s *Service) ValidateCreate(req *CreateRequest, fields map[string]string) error {
	if fields == nil {
		fields = map[string]string{}
	}
	s.SizeFields("", req.Size, fields)
	EnvFields(req.Env, fields)
	if len(req.Metadata) > MaxMetadata {
		fields["metadata"] = fmt.Sprintf("at most %d entries", MaxMetadata)
	}
	for k, v := range req.Metadata {
		if !metadataKeyRE.MatchString(k) {
			fields["metadata."+k] = "keys are 1-63 characters of letters, digits and _ . - /"
		} else if len(v) > MaxMetadataValue {
			fields["metadata."+k] = fmt.Sprintf("values are at most %d bytes", MaxMetadataValue)
		}
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > MaxTimeoutSeconds {
		fields["timeout_seconds"] = fmt.Sprintf("must be between 0 and %d", MaxTimeoutSeconds)
	}
	if req.IdleTimeoutSeconds < 0 || req.IdleTimeoutSeconds > MaxTimeoutSeconds {
		fields["idle_timeout_seconds"] = fmt.Sprintf("must be between 0 and %d", MaxTimeoutSeconds)
	}
	req.Network = PolicyFields(req.Network, fields)
	if len(fields) > 0 {
		return Invalid(fields)
	}
	return nil
}

// PolicyFields validates a network policy into fields (field path ->
// reason) and returns it compacted; an absent policy is nil.
func PolicyFields(raw json.RawMessage, fields map[string]string) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	if _, err := egress.ParsePolicy(raw); err != nil {
		MergeFields(err, "network", fields)
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		fields["network"] = "must be a JSON object"
		return nil
	}
	return buf.Bytes()
}

// MergeFields copies the per-field details of a validation error into
// fields, or its message under field when it has none.
func MergeFields(err error, field string, fields map[string]string) {
	var pub *errdefs.Public
	if errors.As(err, &pub) {
		if inner, ok := pub.Details["fields"].(map[string]string); ok { // Invalid's
			for k, v := range inner {
				fields[k] = v
			}
			return
		}
	}
	if errors.As(err, &pub) && len(pub.Details) > 0 {
		for k, v := range pub.Details {
			fields[k] = fmt.Sprint(v)
		}
		return
	}
	if errors.As(err, &pub) {
		fields[field] = pub.Message
		return
	}
	fields[field] = "invalid"
}

// ValidKeep checks a new time to live.
func ValidKeep(seconds int) error {
	if seconds <= 0 || seconds > MaxTimeoutSeconds {
		return Invalid(map[string]string{"timeout_seconds": fmt.Sprintf("must be between 1 and %d", MaxTimeoutSeconds)})
	}
	return nil
}

// PTYOf is a terminal of rows x cols for a ProcessSpec; a size no
// terminal can have becomes 0, which ValidateSpec refuses.
func PTYOf(rows, cols int) *agentproto.PTY {
	fit := func(n int) uint16 {
		if n < 1 || n > MaxPTY {
			return 0
		}
		return uint16(n)
	}
	return &agentproto.PTY{Rows: fit(rows), Cols: fit(cols)}
}

// ValidPTYSize checks a terminal size (a resize's or a command's).
func ValidPTYSize(rows, cols int) bool {
	return rows >= 1 && rows <= MaxPTY && cols >= 1 && cols <= MaxPTY
}

// ValidResize checks a terminal resize.
func ValidResize(rows, cols int) error {
	if !ValidPTYSize(rows, cols) {
		return Invalid(map[string]string{"rows": fmt.Sprintf("rows and cols must be between 1 and %d", MaxPTY)})
	}
	return nil
}

// ValidSignal checks a signal to send (a name such as "SIGTERM" or a
// number).
func ValidSignal(signal string) error {
	if _, err := agentproto.ParseSignal(signal); err != nil || len(signal) > 16 {
		return Invalid(map[string]string{"signal": `must be a signal name or number, e.g. "SIGTERM"`})
	}
	return nil
}

// ValidateSpec checks a command before it is stored, so that nothing the
// guest agent would refuse with an error of its own (or could not pass to
// execve at all) gets that far.
func ValidateSpec(spec agentproto.ProcessSpec) error {
	f := map[string]string{}
	switch {
	case len(spec.Argv) == 0 && spec.Shell == "":
		f["argv"] = "one of argv and shell is required"
	case len(spec.Argv) > 0 && spec.Shell != "":
		f["shell"] = "give argv or shell, not both"
	case len(spec.Argv) > 0 && spec.Argv[0] == "":
		f["argv"] = "argv[0] must not be empty"
	}
	NoNULs(f, "argv", spec.Argv)
	NoNUL(f, "shell", spec.Shell)
	if NoNUL(f, "cwd", spec.Cwd) && spec.Cwd != "" && !path.IsAbs(spec.Cwd) {
		f["cwd"] = "must be an absolute path"
	}
	NoNUL(f, "user", spec.User)
	EnvFields(spec.Env, f)
	if spec.PTY != nil && !ValidPTYSize(int(spec.PTY.Rows), int(spec.PTY.Cols)) {
		f["pty"] = fmt.Sprintf("rows and cols must be between 1 and %d", MaxPTY)
	}
	if spec.TimeoutSeconds < 0 || spec.TimeoutSeconds > MaxCommandTimeout {
		f["timeout_seconds"] = fmt.Sprintf("must be between 0 and %d", MaxCommandTimeout)
	}
	if len(f) > 0 {
		return Invalid(f)
	}
	return nil
}

// CleanPath checks a path in the guest (absolute, no NUL, at most
// PATH_MAX) and returns it cleaned.
func CleanPath(p string) (string, error) {
	f := map[string]string{}
	switch {
	case p == "":
		f["path"] = "required"
	case !NoNUL(f, "path", p):
	case !path.IsAbs(p):
		f["path"] = "must be an absolute path"
	case len(p) > MaxPathLen:
		f["path"] = fmt.Sprintf("must be at most %d bytes", MaxPathLen)
	}
	if len(f) > 0 {
		return "", Invalid(f)
	}
	return path.Clean(p), nil
}
