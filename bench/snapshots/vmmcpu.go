package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// vmmCounters are what a VMM process has consumed since it started: CPU
// time (user + system, all threads) and page faults that had to read from
// disk. On a machine loaded by other work wall-clock times swing widely,
// while these follow only the work the VMM did: under TCG the guest's
// work is the VMM's CPU time.
type vmmCounters struct {
	cpuMS  float64
	majflt float64
}

// readVMMCounters reads /proc/<pid>/stat.
func readVMMCounters(pid int) (vmmCounters, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return vmmCounters{}, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// f[0] is field 3 (state): majflt is field 12, utime 14, stime 15.
	if len(f) < 13 {
		return vmmCounters{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i-3], 64); return v }
	tick := 100.0 // USER_HZ on Linux
	return vmmCounters{cpuMS: (num(14) + num(15)) * 1000 / tick, majflt: num(12)}, nil
}
