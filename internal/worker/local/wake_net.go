package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/vmm"
)

// The network of wake slots (wake_pool.go): a namespace of the slot's own
// for its tap while it waits, and at the take the tap moved into the
// sandbox's namespace.

// slotNet gives slot sl its namespace, acquired under the placeholder id
// wvm-<slot>, and returns the NIC on its tap; nil without networking.
func (w *Worker) slotNet(ctx context.Context, sl *wakeSlot) (*vmm.Network, error) {
	if !w.networking() {
		return nil, nil
	}
	ns, err := w.cfg.Network.Acquire(ctx, "wvm-"+filepath.Base(sl.dir))
	if err != nil {
		return nil, fmt.Errorf("wake slot network: %w", err)
	}
	sl.netns = ns
	return &vmm.Network{MAC: network.GuestMAC.String(), Tap: func() (*os.File, error) {
		return ns.OpenTap(network.TapOptions{})
	}}, nil
}

// releaseSlotNet removes sl's namespace, with its tap when the tap is
// still there. Safe without one.
func (w *Worker) releaseSlotNet(ctx context.Context, sl *wakeSlot) {
	if sl.netns == nil {
		return
	}
	if err := w.cfg.Network.Release(ctx, sl.netns); err != nil {
		w.log.Warn("release wake slot network", "err", err)
	}
	sl.netns = nil
}

// moveSlotNet makes slot sl's tap the tap of sb's namespace, which keeps
// its rules, listeners and connections: what a wake on a VMM of its own
// would have opened (nic). Without networking it does nothing. On error
// sb's namespace has its own tap again; the caller discards sl.
func (w *Worker) moveSlotNet(ctx context.Context, sb *sandbox, sl *wakeSlot) error {
	if !w.networking() {
		return nil
	}
	sb.mu.Lock()
	ns := sb.netns
	sb.mu.Unlock()
	if ns == nil || sl.netns == nil {
		return fmt.Errorf("sandbox %s or its wake slot has no network namespace: %w", sb.spec.ID, errdefs.ErrInternal)
	}
	if err := w.cfg.Network.MoveTap(ctx, sl.netns, ns); err != nil {
		return err
	}
	w.releaseSlotNet(context.WithoutCancel(ctx), sl)
	return nil
}
