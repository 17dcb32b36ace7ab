package network

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// installRules writes the sandbox namespace's whole ruleset in one netlink
// batch. Everything is dropped except: guest TCP, which is redirected to the
// proxy port; guest DNS (UDP and TCP 53, to any address), which is redirected
// to the DNS port; and replies on connections those listeners accepted.
// Nothing is forwarded (ip_forward stays 0 too), and IPv6 is dropped outright.
func installRules(nsFD int, proxyPort, dnsPort uint16) error {
	c, err := nftables.New(nftables.WithNetNSFd(nsFD))
	if err != nil {
		return fmt.Errorf("nftables: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer c.CloseLasting()

	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "space"})
	pre := c.AddChain(&nftables.Chain{
		Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest,
	})
	for _, r := range [][]expr.Any{
		cat(iif(TapName), l4(unix.IPPROTO_UDP), dport(53), redirect(dnsPort)),
		cat(iif(TapName), l4(unix.IPPROTO_TCP), dport(53), redirect(dnsPort)),
		cat(iif(TapName), l4(unix.IPPROTO_TCP), redirect(proxyPort)),
	} {
		c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: r})
	}

	drop := nftables.ChainPolicyDrop
	in := c.AddChain(&nftables.Chain{
		Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	for _, r := range [][]expr.Any{
		cat(iif("lo"), accept()),
		cat(established(), accept()),
		cat(iif(TapName), l4(unix.IPPROTO_TCP), dport(proxyPort), accept()),
		cat(iif(TapName), l4(unix.IPPROTO_TCP), dport(dnsPort), accept()),
		cat(iif(TapName), l4(unix.IPPROTO_UDP), dport(dnsPort), accept()),
	} {
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: r})
	}
	c.AddChain(&nftables.Chain{
		Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	out := c.AddChain(&nftables.Chain{
		Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(oif("lo"), accept())})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(established(), accept())})

	t6 := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv6, Name: "space"})
	for _, h := range []struct {
		name string
		hook *nftables.ChainHook
	}{{"input", nftables.ChainHookInput}, {"forward", nftables.ChainHookForward}, {"output", nftables.ChainHookOutput}} {
		c.AddChain(&nftables.Chain{
			Name: h.name, Table: t6, Type: nftables.ChainTypeFilter,
			Hooknum: h.hook, Priority: nftables.ChainPriorityFilter, Policy: &drop,
		})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables rules: %w", errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

func iif(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func oif(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func l4(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

func redirect(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func established() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{
			SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0),
		},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }
