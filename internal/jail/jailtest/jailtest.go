// Package jailtest checks, from the host, that a running process is jailed
// as package jail promises. Tests of every VMM driver and of the worker's
// pools, restores and adoption call Check on the VMMs they start.
package jailtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/jail"
)

// Check fails t unless pid runs jailed under st: a uid and gid of the jail
// range, no capabilities, no_new_privs, mount and network namespaces of its
// own in which /etc/shadow and every path in hidden do not exist, member of
// the jail's cgroups and those limited as want says (io weight only where
// the host offers one). With seccomp, it must also run under a seccomp
// filter (mode 2).
func Check(t testing.TB, pid int, st jail.State, want jail.Limits, seccomp bool, hidden ...string) {
	t.Helper()
	if err := Verify(pid, st, want, seccomp, hidden...); err != nil {
		t.Errorf("vmm %d is not jailed: %v", pid, err)
	}
}

// Verify is Check returning the first problem found.
func Verify(pid int, st jail.State, want jail.Limits, seccomp bool, hidden ...string) error {
	proc := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(proc + "/status")
	if err != nil {
		return err
	}
	status := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			status[k] = strings.TrimSpace(v)
		}
	}
	for _, k := range []string{"Uid", "Gid"} {
		ids := strings.Fields(status[k]) // real, effective, saved, fs
		if len(ids) != 4 {
			return fmt.Errorf("%s: %q", k, status[k])
		}
		for _, s := range ids {
			id, _ := strconv.Atoi(s)
			if id == 0 || id < jail.FirstID || id >= jail.FirstID+jail.NumIDs || id != st.UID {
				return fmt.Errorf("%s %q, want %d (jail range)", k, status[k], st.UID)
			}
		}
	}
	if status["Groups"] != "" {
		return fmt.Errorf("supplementary groups %q", status["Groups"])
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if v, err := strconv.ParseUint(status[k], 16, 64); err != nil || v != 0 {
			return fmt.Errorf("%s = %q, want 0", k, status[k])
		}
	}
	if status["NoNewPrivs"] != "1" {
		return fmt.Errorf("NoNewPrivs = %q", status["NoNewPrivs"])
	}
	if seccomp && status["Seccomp"] != "2" {
		return fmt.Errorf("Seccomp = %q, want 2 (filter)", status["Seccomp"])
	}
	for _, ns := range []string{"mnt", "net", "ipc"} {
		mine, err1 := os.Readlink("/proc/self/ns/" + ns)
		its, err2 := os.Readlink(proc + "/ns/" + ns)
		if err1 != nil || err2 != nil || mine == its {
			return fmt.Errorf("%s namespace %q is the host's (%q) (%v %v)", ns, its, mine, err1, err2)
		}
	}
	for _, p := range append([]string{"/etc/shadow", "/etc", "/proc/1", "/sys/fs/cgroup", "/root", "/tmp"}, hidden...) {
		if _, err := os.Lstat(filepath.Join(proc, "root", p)); !os.IsNotExist(err) {
			return fmt.Errorf("%s is in view of the vmm (%v)", p, err)
		}
	}
	if b, err := os.ReadFile(proc + "/limits"); err != nil || !hasLimit(string(b), "Max core file size", "0") {
		return fmt.Errorf("core dumps not off: %v\n%s", err, b)
	}
	cg, err := os.ReadFile(proc + "/cgroup")
	if err != nil {
		return err
	}
	for _, d := range st.Cgroups {
		rel := "/" + filepath.Base(filepath.Dir(d)) + "/" + filepath.Base(d)
		if !strings.Contains(string(cg), rel+"\n") {
			return fmt.Errorf("not in cgroup %s:\n%s", d, cg)
		}
	}
	got, err := st.Limits()
	if err != nil {
		return err
	}
	if got.MemoryBytes != want.MemoryBytes || got.PIDs != want.PIDs || got.CPUs != want.CPUs ||
		(got.IOWeight != 0 && got.IOWeight != want.IOWeight) {
		return fmt.Errorf("cgroup limits %+v, want %+v", got, want)
	}
	return nil
}

func hasLimit(limits, name, soft string) bool {
	for _, line := range strings.Split(limits, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok {
			f := strings.Fields(rest)
			return len(f) >= 2 && f[0] == soft && f[1] == soft
		}
	}
	return false
}
