package agent

import (
	"log/slog"
	"os"
)

// idleSysctls cut what an idle guest wakes up for. Under TCG each wake-up
// of the guest (a timer interrupt, a kernel thread run) is emulated work
// on the host's CPU, paid by every idle sandbox every second; traced with
// the guest's timer and sched_wakeup events over 10 s idle, these three
// were most of the wake-ups the kernel makes on its own:
//   - kcompactd checks for proactive compaction every 500 ms; with
//     proactiveness 0 it compacts only on demand (allocation stalls,
//     kswapd), as before proactive compaction existed.
//   - vmstat folds per-CPU counters into the global ones every
//     stat_interval seconds (1); each fold is a timer and a kworker run.
//     The counters stay exact to within the per-CPU thresholds, which on
//     one or two vCPUs are small; 10 s keeps /proc/vmstat fresh enough.
//   - the soft-lockup watchdog wakes every 4 s; under TCG on a loaded host
//     it only ever reports false lockups, to the serial console.
var idleSysctls = []struct{ path, value string }{
	{"/proc/sys/vm/compaction_proactiveness", "0"},
	{"/proc/sys/vm/stat_interval", "10"},
	{"/proc/sys/kernel/watchdog", "0"},
}

// quietIdle applies idleSysctls, best effort: a kernel without one of them
// only idles less quietly.
func quietIdle(log *slog.Logger) {
	for _, s := range idleSysctls {
		if err := os.WriteFile(s.path, []byte(s.value), 0); err != nil {
			log.Warn("idle sysctl", "path", s.path, "err", err)
		}
	}
}
