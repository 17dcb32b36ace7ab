package testenv

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// hostsFile is the file the host's resolver (and so the egress proxy) reads
// names from.
const hostsFile = "/etc/hosts"

// AddHosts maps each name to its address in /etc/hosts for the test and
// removes exactly those lines at its cleanup, leaving every other line as
// it then is. Tests of other packages run in other processes at the same
// time and edit the file too (e2e and e2e/cluster both do), so every edit
// is a read-modify-write under an exclusive flock of the file: none loses
// another's lines, and a cleanup never restores a copy taken before
// another test added its own. A line for one of the names that a killed
// run left is replaced.
func AddHosts(t testing.TB, hosts map[string]netip.Addr) {
	t.Helper()
	names := make([]string, 0, len(hosts))
	for n := range hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	err := editHosts(func(lines []string) []string {
		lines = dropNames(lines, names)
		for _, n := range names {
			lines = append(lines, hosts[n].String()+" "+n)
		}
		return lines
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := editHosts(func(lines []string) []string { return dropNames(lines, names) }); err != nil {
			t.Errorf("remove the test's lines from %s: %v", hostsFile, err)
		}
	})
}

// editHosts rewrites /etc/hosts in place (same inode and mode) with edit's
// lines, holding an exclusive flock on it throughout.
func editHosts(edit func(lines []string) []string) error {
	f, err := os.OpenFile(hostsFile, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", hostsFile, err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	out := []byte(strings.Join(edit(lines), "\n") + "\n")
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(out, 0)
	return err
}

// dropNames is lines without those that name any of names.
func dropNames(lines, names []string) []string {
	var kept []string
	for _, line := range lines {
		fields := strings.Fields(line)
		if len(fields) > 1 && slices.ContainsFunc(fields[1:], func(f string) bool { return slices.Contains(names, f) }) {
			continue
		}
		kept = append(kept, line)
	}
	return kept
}
