package stats

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// VMMCounters are what a VMM process has consumed since it started: CPU
// time (user + system, all threads) and page faults that had to read from
// disk. On a machine loaded by other work wall-clock times swing widely,
// while these follow only the work the VMM did: under TCG the guest's
// work is the VMM's CPU time.
type VMMCounters struct {
	CPUMS  float64
	Majflt float64
}

// ReadProcCounters reads /proc/<pid>/stat (pid 0: this process).
func ReadProcCounters(pid int) (VMMCounters, error) {
	path := "/proc/self/stat"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return VMMCounters{}, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// f[0] is field 3 (state): majflt is field 12, utime 14, stime 15.
	if len(f) < 13 {
		return VMMCounters{}, fmt.Errorf("short %s", path)
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i-3], 64); return v }
	tick := 100.0 // USER_HZ on Linux
	return VMMCounters{CPUMS: (num(14) + num(15)) * 1000 / tick, Majflt: num(12)}, nil
}
