package firecracker

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmproc"
)

// Files the driver owns in a VM's StateDir. Stop and Recover-on-dead remove
// exactly these (and the run dir with everything in it).
const (
	fileState   = "firecracker-state.json"
	fileConsole = "console.log"
	fileVMMLog  = "firecracker.stderr.log"
	dirRun      = "run"

	// In the run dir.
	fileAPI       = "api.sock"
	fileVsock     = "v.sock"
	fileFCLog     = "firecracker.log"
	fileLoadState = "vmstate"
	fileNewMemory = "memory.new"
	fileNewState  = "vmstate.new"
)

var ownedFiles = []string{fileState, fileConsole, fileVMMLog}

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
	vmmproc.RemoveRecord(dir, fileState)
	_ = os.RemoveAll(filepath.Join(dir, dirRun))
}

// makeRunDir makes the run dir the jailed VMM writes in. Its uid is drawn
// only as the jail starts, after the VMM must already be able to bind its
// API socket here, so the dir starts writable by anyone (sticky: no one
// removes another's files) and is handed to the VMM's uid once it runs.
// Only root and this one jail can reach it: the state dir is root's.
func makeRunDir(stateDir string) error {
	d := filepath.Join(stateDir, dirRun)
	_ = os.RemoveAll(d)
	if err := os.Mkdir(d, 0o700); err != nil {
		return err
	}
	return os.Chmod(d, os.ModeSticky|0o733)
}

// giveRunDir hands the run dir (and a file the host put in it) to the
// VMM's uid once it is known.
func giveRunDir(stateDir string, uid int, files ...string) error {
	d := filepath.Join(stateDir, dirRun)
	for _, f := range files {
		p := filepath.Join(d, f)
		if err := os.Chown(p, uid, uid); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o600); err != nil {
			return err
		}
	}
	if err := os.Chown(d, uid, uid); err != nil {
		return err
	}
	return os.Chmod(d, 0o700)
}

// alive reports whether pid is still the process recorded with startTime.
func alive(pid int, startTime uint64) bool { return jail.Alive(pid, startTime) }

// moveFile renames src to dst, copying when they are on different
// filesystems.
func moveFile(src, dst string) error {
	err := os.Rename(src, dst)
	if err == nil || !errors.Is(err, syscall.EXDEV) {
		return err
	}
	if err := copyFile(src, dst, 0o600); err != nil {
		return err
	}
	return os.Remove(src)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := out.ReadFrom(in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
