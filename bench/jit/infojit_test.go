package main

import "testing"

// qemu72InfoJit is what QEMU 7.2 (Debian 12) printed for a restored guest.
const qemu72InfoJit = `Translation buffer state:
gen code size       8147795/134212608
TB count            14101
TB avg target size  18 max=465 bytes
TB avg host size    336 bytes (expansion ratio: 17.8)
cross page TB count 43 (0%)
direct jump count   9133 (64%) (2 jumps=7562 53%)

Statistics:
TB flush count      1
TB invalidate count 0
TLB full flushes    0
TLB partial flushes 28
TLB elided flushes  764
[TCG profiler not compiled]
`

func TestParseInfoJit(t *testing.T) {
	got, err := parseInfoJit(qemu72InfoJit)
	if err != nil {
		t.Fatal(err)
	}
	want := jitState{TBs: 14101, CodeBytes: 8147795, Flushes: 1, Invalidations: 0}
	if got != want {
		t.Fatalf("parseInfoJit = %+v, want %+v", got, want)
	}
}

func TestParseInfoJitMissingField(t *testing.T) {
	// "TB count" is gone (only "cross page TB count" remains): a changed
	// format must fail, not read as zero.
	if _, err := parseInfoJit("gen code size 1/2\ncross page TB count 4 (0%)\nTB flush count 0\nTB invalidate count 0\n"); err == nil {
		t.Fatal("parseInfoJit accepted output without a TB count")
	}
}
