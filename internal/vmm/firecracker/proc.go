package firecracker

import (
	"os"
	"path/filepath"

	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmproc"
)

// Files the driver owns in a VM's StateDir. Stop and Recover-on-dead remove
// exactly these, the old parts of its logs (jail.OldLogPath), and the run
// dir with everything in it.
const (
	fileState   = "firecracker-state.json"
	fileConsole = "console.log"            // the guest's serial console (Firecracker's stdout)
	fileVMMLog  = "firecracker.stderr.log" // Firecracker's stderr
	fileHostLog = "firecracker.log"        // what Firecracker's logger writes into run/firecracker.log
	dirRun      = "run"

	// In the run dir.
	fileAPI       = "api.sock"
	fileVsock     = "v.sock"
	fileFCLog     = "firecracker.log" // a FIFO the log copier reads
	fileLoadState = "vmstate"
	fileNewMemory = "memory.new"
	fileNewState  = "vmstate.new"
)

var (
	ownedFiles = []string{fileState, fileConsole, fileVMMLog, fileHostLog}
	logFiles   = []string{fileConsole, fileVMMLog, fileHostLog}
)

// What the logs keep (jail.Log: a live and an old part of at most this
// each, copied from the VMM's pipes whether or not a worker runs): the
// console as much as ConsoleTail reads, Firecracker's own messages enough
// for the last errors.
const (
	consoleKeep = 256 << 10
	vmmLogKeep  = 64 << 10
)

// record is what Start writes to StateDir so a later worker process can find
// and adopt the VMM.
type record struct {
	Spec      vmm.BootSpec `json:"spec"`
	PID       int          `json:"pid"`
	StartTime uint64       `json:"start_time"` // /proc/<pid>/stat field 22, guards against PID reuse
	Binary    string       `json:"binary"`
	// Tap is the host device name of the NIC ("" without one).
	Tap string `json:"tap,omitempty"`
	// Incoming: started empty, to load a snapshot (StartIncoming).
	Incoming bool        `json:"incoming,omitempty"`
	Jail     *jail.State `json:"jail,omitempty"`
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
	for _, f := range logFiles {
		_ = os.Remove(jail.OldLogPath(filepath.Join(dir, f)))
	}
	vmmproc.RemoveRecord(dir, fileState)
	_ = os.RemoveAll(filepath.Join(dir, dirRun))
}

// makeRunDir makes the run dir the jailed VMM writes in and returns it
// open: the host touches what is in it only through that fd (jail.OpenIn),
// since the VMM can plant anything there. Its uid is drawn only as the
// jail starts, after the VMM must already be able to bind its API socket
// here, so the dir starts writable by anyone (sticky: no one removes
// another's files) and is handed to the VMM's uid once it runs. Only root
// and this one jail can reach it: the state dir is root's.
func makeRunDir(stateDir string) (*os.File, error) {
	d := filepath.Join(stateDir, dirRun)
	_ = os.RemoveAll(d)
	if err := os.Mkdir(d, 0o700); err != nil {
		return nil, err
	}
	f, err := jail.OpenDir(d)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(os.ModeSticky | 0o733); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// giveRunDir hands the run dir to the VMM's uid once it is known.
func giveRunDir(run *os.File, uid int) error {
	if err := run.Chown(uid, uid); err != nil {
		return err
	}
	return run.Chmod(0o700)
}

// vmmLogs are the VMM's bounded logs: its stdout (the console), its
// stderr, and the FIFO its logger writes.
type vmmLogs struct{ console, stderr, logger *jail.Log }

func openLogs(stateDir string, run *os.File) (_ *vmmLogs, err error) {
	l := &vmmLogs{}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if l.console, err = jail.NewLog(filepath.Join(stateDir, fileConsole), consoleKeep); err != nil {
		return nil, err
	}
	if l.stderr, err = jail.NewLog(filepath.Join(stateDir, fileVMMLog), vmmLogKeep); err != nil {
		return nil, err
	}
	if l.logger, err = jail.NewFIFOLog(run, fileFCLog, filepath.Join(stateDir, fileHostLog), vmmLogKeep); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *vmmLogs) all() []*jail.Log { return []*jail.Log{l.console, l.stderr, l.logger} }

func (l *vmmLogs) close() {
	for _, x := range l.all() {
		if x != nil {
			x.Close()
		}
	}
}

// alive reports whether pid is still the process recorded with startTime.
func alive(pid int, startTime uint64) bool { return jail.Alive(pid, startTime) }
