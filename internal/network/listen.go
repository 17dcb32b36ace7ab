package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Listeners are the sockets, bound inside a sandbox namespace, that the
// namespace's rules redirect guest traffic to. Hand them to the egress
// service; closing them is the caller's job (before Release).
type Listeners struct {
	Proxy  net.Listener   // all guest TCP except port 53
	DNSTCP net.Listener   // guest DNS over TCP
	DNSUDP net.PacketConn // guest DNS over UDP
}

// Close closes every listener that is set.
func (l Listeners) Close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{l.Proxy, l.DNSTCP, l.DNSUDP} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Listen opens the proxy and DNS listeners inside the sandbox namespace.
func (s *Sandbox) Listen(ctx context.Context) (Listeners, error) {
	var l Listeners
	err := InNamespace(s.Path(), func() error {
		var lc net.ListenConfig
		var err error
		// Bound to the gateway address: nothing else in the namespace is
		// reachable anyway, and this keeps them off loopback.
		if l.Proxy, err = lc.Listen(ctx, "tcp4", hostPort(s.cfg.ProxyPort)); err != nil {
			return err
		}
		if l.DNSTCP, err = lc.Listen(ctx, "tcp4", hostPort(s.cfg.DNSPort)); err != nil {
			return err
		}
		l.DNSUDP, err = lc.ListenPacket(ctx, "udp4", hostPort(s.cfg.DNSPort))
		return err
	})
	if err != nil {
		_ = l.Close()
		return Listeners{}, fmt.Errorf("listen in sandbox netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	return l, nil
}

func hostPort(p uint16) string {
	return net.JoinHostPort(GatewayAddr.String(), strconv.Itoa(int(p)))
}
