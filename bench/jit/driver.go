package main

import (
	"context"
	"sync"

	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/qemu"
)

// recorder is the QEMU driver, unchanged, that also keeps every VM it
// starts by VMM PID, so the bench can ask a sandbox's VMM for "info jit".
// Embedding keeps the driver's optional interfaces (Restorer,
// IncomingStarter) for the worker's type assertions.
type recorder struct {
	*qemu.Driver
	mu  sync.Mutex
	vms map[int]*qemu.VM
}

func (r *recorder) keep(vm vmm.VM, err error) (vmm.VM, error) {
	if q, ok := vm.(*qemu.VM); ok && err == nil {
		r.mu.Lock()
		r.vms[q.PID()] = q
		r.mu.Unlock()
	}
	return vm, err
}

func (r *recorder) vm(pid int) *qemu.VM {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.vms[pid]
}

func (r *recorder) Start(ctx context.Context, spec vmm.BootSpec) (vmm.VM, error) {
	return r.keep(r.Driver.Start(ctx, spec))
}

func (r *recorder) StartIncoming(ctx context.Context, spec vmm.BootSpec) (vmm.VM, error) {
	return r.keep(r.Driver.StartIncoming(ctx, spec))
}

func (r *recorder) Restore(ctx context.Context, spec vmm.BootSpec, snapshotDir string) (vmm.VM, error) {
	return r.keep(r.Driver.Restore(ctx, spec, snapshotDir))
}
