package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/qemu"
	"github.com/space-sandbox/space/internal/worker/local"
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

// sandboxVM is the VM of sandbox id's VMM, which r must have started.
func (r *recorder) sandboxVM(ctx context.Context, w *local.Worker, id string) (*qemu.VM, error) {
	st, err := w.Sandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if vm := r.vms[st.VMMPID]; vm != nil {
		return vm, nil
	}
	return nil, fmt.Errorf("%s: VMM %d was not started through the bench's driver", id, st.VMMPID)
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
