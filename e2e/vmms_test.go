package e2e

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/jail"
)

// vmmRecordNames are the files a VMM driver writes into a VM's state dir
// before its VMM may run (qemu, firecracker): a VMM of a data dir always
// has one, even when the spaced that started it is dead.
var vmmRecordNames = []string{"qemu-state.json", "firecracker-state.json"}

// vmmRecord is the part of a driver's record that finds its process.
type vmmRecord struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	Jail      *struct {
		Cgroups []string `json:"cgroups"`
	} `json:"jail"`
}

// serverVMMs lists the live VMM processes of the server on dataDir, by
// PID: every recorded VMM still the process it was (start time checked, so
// a reused PID is not taken for it), every process in its jail's cgroups,
// and any QEMU whose command line names the data dir.
func serverVMMs(dataDir string) []int {
	pids := vmmPIDs(dataDir)
	_ = filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !slices.Contains(vmmRecordNames, d.Name()) {
			return nil
		}
		b, err := os.ReadFile(path)
		var rec vmmRecord
		if err != nil || json.Unmarshal(b, &rec) != nil || rec.PID <= 0 {
			return nil
		}
		if !jail.Alive(rec.PID, rec.StartTime) {
			// Its jail id, and so its cgroup's name, may be another
			// jail's by now: read the cgroup only while the VMM lives.
			return nil
		}
		pids = append(pids, rec.PID)
		if rec.Jail != nil {
			for _, cg := range rec.Jail.Cgroups {
				pids = append(pids, cgroupPIDs(cg)...)
			}
		}
		return nil
	})
	slices.Sort(pids)
	return slices.Compact(pids)
}

// cgroupPIDs lists the processes in a jail's cgroup; a cgroup the jail
// already removed has none.
func cgroupPIDs(dir string) []int {
	if !strings.HasPrefix(dir, "/sys/fs/cgroup/") {
		return nil // a record names only cgroups; anything else is not ours to read
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killVMMs SIGKILLs every VMM of dataDir by PID and waits (bounded) for
// each to be gone; it returns those it found. It is what ends the VMMs a
// killed spaced left when no restarted one adopts and deletes them.
func killVMMs(dataDir string) []int {
	var killed []int
	for round := 0; round < 3; round++ { // a jail starting as we look shows up in the next round
		pids := serverVMMs(dataDir)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			waitExit(pid)
		}
		killed = append(killed, pids...)
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(killed)
	return slices.Compact(killed)
}
