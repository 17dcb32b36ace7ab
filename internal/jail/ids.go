package jail

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Ids are taken from [FirstID, FirstID+NumIDs): a range no distribution
// allocates (systemd documents 1879048192-2147483647 as unused), so no
// host account ever shares an id with a VMM. The uid doubles as the gid.
const (
	FirstID = 1_900_000_000
	NumIDs  = 1 << 16
)

// idDir holds one file per id in use, host-wide: every worker process on
// the host (and every test binary) draws from the same range, so two VMMs
// never share an id. The file is created with O_EXCL (that is the
// allocation) and holds the VMM's pid and start time once it runs; only
// the host removes it, after the VMM is gone. A lock held by the VMM
// itself would not do: a compromised VMM could drop it and have the next
// VMM share its uid. /run is a tmpfs, so a reboot frees every id.
var idDir = "/run/space-jail/ids"

// allocID reserves a free id; release gives it back.
func allocID() (int, error) {
	if err := os.MkdirAll(idDir, 0o700); err != nil {
		return 0, fmt.Errorf("jail: id dir: %w: %v", errdefs.ErrInternal, err)
	}
	start := rand.IntN(NumIDs)
	for i := range NumIDs {
		id := FirstID + (start+i)%NumIDs
		f, err := os.OpenFile(idPath(id), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("jail: reserve id: %w: %v", errdefs.ErrInternal, err)
		}
		f.Close()
		return id, nil
	}
	return 0, fmt.Errorf("jail: all %d VMM ids are in use: %w", NumIDs, errdefs.ErrResourceExhausted)
}

func idPath(id int) string { return filepath.Join(idDir, strconv.Itoa(id)) }

// recordID writes who holds id, so a sweep can tell a dead holder, and its
// cgroups, which a sweep by a process in other (v1) cgroups would not find.
func recordID(id, pid int, start uint64, cgroups []string) error {
	b := fmt.Sprintf("%d %d\n", pid, start)
	for _, d := range cgroups {
		b += d + "\n"
	}
	return os.WriteFile(idPath(id), []byte(b), 0o600)
}

// recordedCgroups are the cgroups recordID wrote for id.
func recordedCgroups(id int) []string {
	b, err := os.ReadFile(idPath(id))
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var out []string
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, cgroupRoot+"/") && strings.HasSuffix(l, "/"+cgroupParent+"/"+strconv.Itoa(id)) {
			out = append(out, l)
		}
	}
	return out
}

func releaseID(id int) { _ = os.Remove(idPath(id)) }

// InUse reports whether id is reserved by a jail.
func InUse(id int) bool {
	_, err := os.Stat(idPath(id))
	return err == nil
}

// idInUse reports whether the holder recorded for id still runs. A file
// without a holder is an allocation whose VMM is being started; it counts
// as in use for a minute.
func idInUse(id int) bool {
	p := idPath(id)
	b, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	var pid int
	var start uint64
	first, _, _ := strings.Cut(string(b), "\n")
	if _, err := fmt.Sscanf(first, "%d %d", &pid, &start); err != nil {
		st, err := os.Stat(p)
		return err == nil && time.Since(st.ModTime()) < time.Minute
	}
	return Alive(pid, start)
}

// Alive reports whether pid is still the process that started at start
// (field 22 of /proc/<pid>/stat), so a reused pid is not mistaken for it.
func Alive(pid int, start uint64) bool {
	st, err := StartTime(pid)
	return err == nil && st == start
}

// StartTime reads field 22 of /proc/<pid>/stat (start time in clock ticks
// since boot). Zombies count as gone.
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, os.ErrNotExist
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Sweep releases what jails whose VMM died while no worker watched left
// behind: their ids and their (empty) cgroups. Live VMMs, and those being
// started by another process, are left alone.
func Sweep() {
	ents, _ := os.ReadDir(idDir)
	for _, e := range ents {
		id, err := strconv.Atoi(e.Name())
		if err != nil || idInUse(id) {
			continue
		}
		dirs := recordedCgroups(id)
		for _, d := range cgroupDirs(id) {
			if !contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		st := State{UID: id, GID: id, Cgroups: dirs}
		st.Release()
	}
	// Cgroups whose id file is gone (a release interrupted between the two).
	for _, parent := range cgroupParents() {
		dirs, _ := os.ReadDir(parent)
		for _, d := range dirs {
			id, err := strconv.Atoi(d.Name())
			if err != nil || !d.IsDir() {
				continue
			}
			if _, err := os.Stat(idPath(id)); errors.Is(err, os.ErrNotExist) {
				_ = removeCgroup(filepath.Join(parent, d.Name()))
			}
		}
	}
}
