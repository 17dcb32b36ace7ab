package qemu

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmproc"
)

// Files the driver owns in a VM's StateDir. Stop and Recover-on-dead remove
// exactly these.
const (
	fileState      = "qemu-state.json"
	fileQMP        = "qmp.sock"
	fileAgent      = "agent.sock"
	fileConsole    = "console.log"
	fileConsoleOld = "console.old.log" // jail.OldLogPath of fileConsole
	fileVMMLog     = "qemu.log"
)

var ownedFiles = []string{fileState, fileQMP, fileAgent, fileConsole, fileConsoleOld, fileVMMLog, fileRestoreKernel}

// record is what Start writes to StateDir so a later worker process can find
// and adopt the VMM.
type record struct {
	Spec      vmm.BootSpec `json:"spec"`
	PID       int          `json:"pid"`
	StartTime uint64       `json:"start_time"` // /proc/<pid>/stat field 22, guards against PID reuse
	Accel     string       `json:"accel"`
	Binary    string       `json:"binary"`
	Incoming  bool         `json:"incoming,omitempty"`
	// Jail is the VMM's jail (uid, cgroups); nil in records written
	// before VMMs were jailed.
	Jail *jail.State `json:"jail,omitempty"`
	// BoundedLogs: the VMM writes its logs through the jail's log copier;
	// false in records written before, whose console file the worker
	// rotates.
	BoundedLogs bool `json:"bounded_logs,omitempty"`
}

func writeRecord(dir string, r record) error { return vmmproc.WriteRecord(dir, fileState, r) }

func readRecord(dir string) (record, error) {
	var r record
	err := vmmproc.ReadRecord(dir, fileState, &r, func() bool { return r.PID > 0 })
	return r, err
}

func removeOwned(dir string) {
	for _, f := range ownedFiles {
		_ = os.Remove(filepath.Join(dir, f))
	}
	_ = os.Remove(jail.OldLogPath(filepath.Join(dir, fileVMMLog)))
	vmmproc.RemoveRecord(dir, fileState)
}

func procStartTime(pid int) (uint64, error) { return jail.StartTime(pid) }

// alive reports whether pid is still the process recorded with startTime.
func alive(pid int, startTime uint64) bool { return jail.Alive(pid, startTime) }

func lastLines(b []byte, n int) []string {
	s := strings.TrimRight(strings.ReplaceAll(string(b), "\r", ""), "\n")
	if s == "" || n <= 0 {
		return nil
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
