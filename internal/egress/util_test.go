package egress

import "net/netip"

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }
