package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// SecretLookup resolves a secret for the egress proxy at request time; scope
// is the sandbox's SandboxSpec.SecretScope.
type SecretLookup func(ctx context.Context, scope, name string) (string, error)

// SandboxSecretLookup resolves a secret for the egress proxy of sandbox
// sandboxID at request time.
type SandboxSecretLookup func(ctx context.Context, sandboxID, name string) (string, error)

// denyAll is the policy of a sandbox created without one.
var denyAll = json.RawMessage(`{"egress":{"default":"deny"}}`)

// networking reports whether this worker gives sandboxes a network.
func (w *Worker) networking() bool { return w.cfg.Network != nil && w.cfg.Egress != nil }

// withNetwork fills in the deny-all policy when the worker has networking
// and spec has none, so every VM gets the same NIC (and snapshots agree).
func (w *Worker) withNetwork(spec worker.SandboxSpec) worker.SandboxSpec {
	if w.networking() && (len(spec.Network) == 0 || string(spec.Network) == "null") {
		spec.Network = denyAll
	}
	return spec
}

func (w *Worker) secretFunc(sandboxID, scope string) egress.SecretFunc {
	if w.cfg.SandboxSecrets != nil {
		return func(ctx context.Context, name string) (string, error) {
			return w.cfg.SandboxSecrets(ctx, sandboxID, name)
		}
	}
	if w.cfg.Secrets == nil || scope == "" {
		return nil
	}
	return func(ctx context.Context, name string) (string, error) { return w.cfg.Secrets(ctx, scope, name) }
}

// checkPolicy is netUp's verdict on spec's policy alone: refused without
// networking, parsed with it.
func (w *Worker) checkPolicy(spec worker.SandboxSpec) error {
	if !w.networking() {
		if len(spec.Network) > 0 && string(spec.Network) != "null" {
			return errdefs.New(errdefs.ErrFailedPrecondition, "network policies are not available on this worker")
		}
		return nil
	}
	_, err := egress.ParsePolicy(spec.Network)
	return err
}

// netUp gives sb its namespace (a fresh one, or with adopt the one it
// already has), opens the egress listeners in it and attaches them under
// the sandbox's policy. On error nothing is left.
func (w *Worker) netUp(ctx context.Context, sb *sandbox, adopt bool) (err error) {
	if err := w.checkPolicy(sb.spec); err != nil || !w.networking() {
		return err
	}
	id := sb.spec.ID
	var ns *network.Sandbox
	if adopt {
		ns, err = w.cfg.Network.Adopt(ctx, id)
	}
	if !adopt || errors.Is(err, errdefs.ErrNotFound) {
		ns, err = w.cfg.Network.Acquire(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("sandbox network: %w", err)
	}
	return w.attachNet(ctx, sb, ns)
}

// netUpPooled gives sb the namespace of the pooled VM e, renamed to sb's,
// and attaches the egress listeners under sb's policy. On error the
// namespace is released (e's VM then has no network: discard it).
func (w *Worker) netUpPooled(ctx context.Context, sb *sandbox, e *poolEntry) error {
	if err := w.checkPolicy(sb.spec); err != nil || !w.networking() {
		return err
	}
	ns, err := w.cfg.Network.Rename(ctx, e.netns, sb.spec.ID)
	if err != nil {
		return fmt.Errorf("sandbox network: %w", err)
	}
	e.netns = nil
	return w.attachNet(ctx, sb, ns)
}

// attachNet opens the egress listeners in ns, attaches them under sb's
// policy and makes ns sb's. On error ns is released.
func (w *Worker) attachNet(ctx context.Context, sb *sandbox, ns *network.Sandbox) (err error) {
	defer func() {
		if err != nil {
			_ = w.cfg.Network.Release(context.WithoutCancel(ctx), ns)
		}
	}()
	p, err := egress.ParsePolicy(sb.spec.Network)
	if err != nil {
		return err
	}
	ls, err := ns.Listen(ctx)
	if err != nil {
		return err
	}
	if err := w.cfg.Egress.Attach(ctx, sb.spec.ID, egress.Listeners{Proxy: ls.Proxy, DNSTCP: ls.DNSTCP, DNSUDP: ls.DNSUDP},
		p, w.secretFunc(sb.spec.ID, sb.spec.SecretScope)); err != nil {
		_ = ls.Close()
		return err
	}
	sb.mu.Lock()
	sb.netns = ns
	sb.mu.Unlock()
	return nil
}

// poolNet gives a pooled VM its namespace, acquired under the placeholder
// id pvm-<entry>, and the NIC on its tap; both nil without networking. No
// listeners are opened in it: see pool.go.
func (w *Worker) poolNet(ctx context.Context, entry string) (*network.Sandbox, *vmm.Network, error) {
	if !w.networking() {
		return nil, nil, nil
	}
	ns, err := w.cfg.Network.Acquire(ctx, "pvm-"+entry)
	if err != nil {
		return nil, nil, fmt.Errorf("pool vm network: %w", err)
	}
	return ns, &vmm.Network{MAC: network.GuestMAC.String(), Tap: func() (*os.File, error) {
		return ns.OpenTap(network.TapOptions{})
	}}, nil
}

// netDown undoes netUp: egress detached (listeners closed), namespace
// removed. Safe to call twice and for a sandbox without a network.
func (w *Worker) netDown(ctx context.Context, sb *sandbox) error {
	if !w.networking() {
		return nil
	}
	sb.mu.Lock()
	ns := sb.netns
	sb.netns = nil
	sb.mu.Unlock()
	err := w.cfg.Egress.Detach(ctx, sb.spec.ID)
	if ns == nil {
		ns, _ = w.cfg.Network.Adopt(ctx, sb.spec.ID) // left by an earlier process
	}
	if ns != nil {
		err = errors.Join(err, w.cfg.Network.Release(ctx, ns))
	}
	if err != nil {
		return fmt.Errorf("sandbox network teardown: %w", err)
	}
	return nil
}

// nic is the VM's NIC on the sandbox namespace's tap (nil without networking).
func (w *Worker) nic(sb *sandbox) *vmm.Network {
	if !w.networking() {
		return nil
	}
	return &vmm.Network{MAC: network.GuestMAC.String(), Tap: func() (*os.File, error) {
		sb.mu.Lock()
		ns := sb.netns
		sb.mu.Unlock()
		if ns == nil {
			return nil, fmt.Errorf("sandbox %s has no network namespace: %w", sb.spec.ID, errdefs.ErrInternal)
		}
		return ns.OpenTap(network.TapOptions{})
	}}
}

// templateNet gives a template's snapshot VM the same NIC sandboxes have,
// on a namespace of its own (no listeners: nothing answers it); release
// removes that namespace.
func (w *Worker) templateNet(ctx context.Context, name string) (*vmm.Network, func(), error) {
	if !w.networking() {
		return nil, func() {}, nil
	}
	ns, err := w.cfg.Network.Acquire(ctx, name)
	if err != nil {
		return nil, nil, fmt.Errorf("template vm network: %w", err)
	}
	release := func() {
		if err := w.cfg.Network.Release(context.WithoutCancel(ctx), ns); err != nil {
			w.log.Warn("release template vm network", "err", err)
		}
	}
	return &vmm.Network{MAC: network.GuestMAC.String(), Tap: func() (*os.File, error) {
		return ns.OpenTap(network.TapOptions{})
	}}, release, nil
}

// guestNetwork is the guest NIC configuration the agent gets in Configure.
func guestNetwork(spec worker.SandboxSpec) *agentproto.GuestNetwork {
	if len(spec.Network) == 0 || string(spec.Network) == "null" {
		return nil
	}
	return &agentproto.GuestNetwork{
		MAC:     network.GuestMAC.String(),
		Address: fmt.Sprintf("%s/%d", network.GuestAddr, network.GuestPrefix.Bits()),
		Gateway: network.GatewayAddr.String(),
		DNS:     []string{network.GatewayAddr.String()},
	}
}

// SetNetworkPolicy replaces a sandbox's policy at once and keeps it in the
// sandbox's spec file for adoption.
func (w *Worker) SetNetworkPolicy(ctx context.Context, id string, policy json.RawMessage) error {
	p, err := egress.ParsePolicy(policy)
	if err != nil {
		return err
	}
	sb, err := w.lookup(id)
	if err != nil {
		return err
	}
	if !w.networking() {
		return errdefs.New(errdefs.ErrFailedPrecondition, "network policies are not available on this worker")
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	if err := w.cfg.Egress.SetPolicy(ctx, id, p); err != nil {
		return err
	}
	sb.mu.Lock()
	sb.spec.Network = append(json.RawMessage(nil), policy...)
	spec := sb.spec
	sb.mu.Unlock()
	if err := snapfile.WriteJSON(sb.path(specFile), spec); err != nil {
		return fmt.Errorf("persist network policy: %w", errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}

// NetworkLog returns the sandbox's egress audit records.
func (w *Worker) NetworkLog(ctx context.Context, id string) ([]worker.NetworkRecord, error) {
	if _, err := w.lookup(id); err != nil {
		return nil, err
	}
	if !w.networking() {
		return []worker.NetworkRecord{}, nil
	}
	recs, err := w.cfg.Egress.Log(id)
	if err != nil {
		return nil, err
	}
	out := make([]worker.NetworkRecord, len(recs))
	for i, r := range recs {
		out[i] = worker.NetworkRecord{Time: r.Time, Sandbox: r.Sandbox, Kind: r.Kind, Destination: r.Destination,
			Upstream: r.Upstream, Allowed: r.Allowed, Rule: r.Rule, BytesOut: r.BytesOut, BytesIn: r.BytesIn,
			Injected: r.Injected}
	}
	return out, nil
}

// reapNamespaces removes sandbox namespaces no sandbox of this worker owns
// (left by sandboxes deleted while no worker ran, or by a crash).
func (w *Worker) reapNamespaces(ctx context.Context) {
	if !w.networking() {
		return
	}
	w.mu.Lock()
	keep := map[string]bool{}
	for id := range w.sandboxes {
		keep[w.cfg.Network.NameOf(id)] = true
	}
	w.mu.Unlock()
	removed, err := w.cfg.Network.ReapOrphans(ctx, func(name string) bool { return keep[name] })
	if len(removed) > 0 {
		w.log.Info("removed orphaned sandbox namespaces", "count", len(removed))
	}
	if err != nil {
		w.log.Warn("reap sandbox namespaces", "err", err)
	}
}
