package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/vmm/qemu"
)

// jitState is what QEMU's "info jit" says about the translation cache.
type jitState struct {
	TBs, CodeBytes, Flushes, Invalidations int64
}

// parseInfoJit reads QEMU 7.2's "info jit" text ("TB count  14101",
// "gen code size  8147795/134212608", "TB flush count  1", ...). It fails
// when a field is missing, so that a QEMU whose output changed does not
// yield zeros.
func parseInfoJit(text string) (jitState, error) {
	var s jitState
	fields := map[string]*int64{
		"TB count": &s.TBs, "gen code size": &s.CodeBytes,
		"TB flush count": &s.Flushes, "TB invalidate count": &s.Invalidations,
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		for name, dst := range fields {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), name)
			if !ok || seen[name] {
				continue
			}
			f := strings.Fields(rest)
			if len(f) == 0 {
				continue
			}
			num, _, _ := strings.Cut(f[0], "/")
			v, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				return s, fmt.Errorf("info jit: %q: %w", line, err)
			}
			*dst, seen[name] = v, true
		}
	}
	for name := range fields {
		if !seen[name] {
			return s, fmt.Errorf("info jit: no %q in %q", name, text)
		}
	}
	return s, nil
}

// vmmState is one reading of a VMM: its translation cache and the CPU time
// of all its threads.
type vmmState struct {
	jit          jitState
	cpuNS        int64
	minor, major int64 // the VMM's page faults (guest RAM first touched)
}

func readVMM(ctx context.Context, vm *qemu.VM) (vmmState, string, error) {
	text, err := vm.HumanMonitor(ctx, "info jit")
	if err != nil {
		return vmmState{}, "", err
	}
	j, err := parseInfoJit(text)
	if err != nil {
		return vmmState{}, text, err
	}
	st := vmmState{jit: j}
	if st.cpuNS, err = threadsCPU(vm.PID()); err != nil {
		return st, text, err
	}
	st.minor, st.major, err = faults(vm.PID())
	return st, text, err
}

// faults reads the minor and major page faults of pid (/proc/pid/stat
// fields 10 and 12, counted from after the command name).
func faults(pid int) (minor, major int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 10 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	if minor, err = strconv.ParseInt(f[7], 10, 64); err != nil {
		return 0, 0, err
	}
	major, err = strconv.ParseInt(f[9], 10, 64)
	return minor, major, err
}

// threadsCPU sums the run time (schedstat, ns) of every thread of pid:
// finer than /proc/pid/stat's clock ticks.
func threadsCPU(pid int) (int64, error) {
	paths, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(paths) == 0 {
		return 0, fmt.Errorf("no threads for pid %d: %v", pid, err)
	}
	var sum int64
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that just exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		sum += v
	}
	return sum, nil
}
