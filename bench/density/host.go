package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/vmm/qemu"
)

// memAvailable is MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no MemAvailable in /proc/meminfo")
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// vmmPID is the pid of sandbox id's VMM, from the record its driver keeps
// in the state dir (a pooled VMM's command line still names the pool
// entry it was started for).
func vmmPID(data, id string) (int, error) {
	pid, _, _, err := qemu.RecordedJail(filepath.Join(data, "vol", "sandboxes", id, "vm"))
	if err != nil {
		return 0, fmt.Errorf("VMM of %s: %w", id, err)
	}
	return pid, nil
}

// rollup is a process's proportional set size, in MiB.
type rollup struct{ pss, anon, file, shmem float64 }

func readRollup(pid int) (rollup, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return rollup{}, err
	}
	var r rollup
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		mib := kb / 1024
		switch f[0] {
		case "Pss:":
			r.pss = mib
		case "Pss_Anon:":
			r.anon = mib
		case "Pss_File:":
			r.file = mib
		case "Pss_Shmem:":
			r.shmem = mib
		}
	}
	if r.pss == 0 {
		return r, fmt.Errorf("no Pss in /proc/%d/smaps_rollup", pid)
	}
	return r, nil
}

const ksmDir = "/sys/kernel/mm/ksm"

// enableKSM turns KSM on, scanning faster than its default, and returns
// what restores the settings it found.
func enableKSM() (func(), error) {
	saved := map[string]string{}
	for _, k := range []string{"run", "pages_to_scan", "sleep_millisecs"} {
		b, err := os.ReadFile(filepath.Join(ksmDir, k))
		if err != nil {
			return nil, fmt.Errorf("KSM not available: %v", err)
		}
		saved[k] = strings.TrimSpace(string(b))
	}
	restore := func() {
		for _, k := range []string{"pages_to_scan", "sleep_millisecs", "run"} {
			_ = os.WriteFile(filepath.Join(ksmDir, k), []byte(saved[k]), 0)
		}
	}
	for k, v := range map[string]string{"pages_to_scan": "1000", "sleep_millisecs": "20", "run": "1"} {
		if err := os.WriteFile(filepath.Join(ksmDir, k), []byte(v), 0); err != nil {
			restore()
			return nil, fmt.Errorf("KSM %s: %v", k, err)
		}
	}
	return restore, nil
}

// ksmState is what KSM reports merged ("" when it is off).
func ksmState() string {
	read := func(k string) string {
		b, _ := os.ReadFile(filepath.Join(ksmDir, k))
		return strings.TrimSpace(string(b))
	}
	if read("run") != "1" {
		return ""
	}
	return fmt.Sprintf("pages_shared %s, pages_sharing %s, full_scans %s", read("pages_shared"), read("pages_sharing"), read("full_scans"))
}
