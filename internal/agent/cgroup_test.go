package agent

import "testing"

func TestLimitsFor(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name       string
		total      int64
		threadsMax int
		want       limits
	}{
		// A 256 MiB sandbox as the guest kernel sees it.
		{"256 MiB guest", 218 * mib, 1640, limits{memory: 218*mib - 64*mib - 218*mib/16, pids: 218 * 4}},
		{"threads-max binds", 4096 * mib, 2000, limits{memory: 4096*mib - 64*mib - 256*mib, pids: 2000 - 128}},
		// A tiny guest keeps half its memory for commands and a usable
		// number of tasks.
		{"tiny guest", 64 * mib, 100, limits{memory: 32 * mib, pids: 64}},
		{"nothing known", 0, 0, limits{}},
		{"only threads-max", 0, 1000, limits{pids: 872}},
	}
	for _, tt := range tests {
		if got := limitsFor(tt.total, tt.threadsMax); got != tt.want {
			t.Errorf("%s: limitsFor(%d, %d) = %+v, want %+v", tt.name, tt.total, tt.threadsMax, got, tt.want)
		}
	}
}
