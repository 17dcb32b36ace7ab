package netrange

import (
	"net/netip"
	"testing"
)

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		addr           string
		never, private bool
	}{
		{"127.0.0.1", true, false},
		{"::1", true, false},
		{"224.0.0.251", true, false},
		{"10.1.2.3", false, true},
		{"::ffff:192.168.1.1", false, true}, // mapped: judged as IPv4
		{"169.254.169.254", false, true},
		{"100.64.0.1", false, true},
		{"fd00:ec2::254", false, true},
		{"fe80::1%eth0", false, true}, // zone dropped
		{"198.18.0.1", false, true},
		{"8.8.8.8", false, false},
		{"2606:4700::1111", false, false},
	} {
		a := netip.MustParseAddr(tc.addr)
		if got := Contains(Never(), a); got != tc.never {
			t.Errorf("%s in Never = %v, want %v", tc.addr, got, tc.never)
		}
		if got := Contains(Private(), a); got != tc.private {
			t.Errorf("%s in Private = %v, want %v", tc.addr, got, tc.private)
		}
		if got := Contains(NotPublic(), a); got != (tc.never || tc.private) {
			t.Errorf("%s in NotPublic = %v", tc.addr, got)
		}
	}
	for _, m := range Metadata() {
		if !Contains(NotPublic(), m) {
			t.Errorf("metadata address %s is not in NotPublic", m)
		}
	}
}

// TestCopies: a caller changing its copy changes nobody else's.
func TestCopies(t *testing.T) {
	p := Private()
	p[0] = netip.MustParsePrefix("8.8.8.0/24")
	if Contains(Private(), netip.MustParseAddr("8.8.8.8")) {
		t.Fatal("Private's list was changed through a copy")
	}
}
