package local

import (
	"path/filepath"

	"github.com/space-sandbox/space/internal/vmm"
)

// Crash lets go of everything the way a crashed process would: sandbox VMs
// and pooled VMs keep running, for the next worker to adopt or reap.
func (w *Worker) Crash() {
	w.closeOnce.Do(func() {
		close(w.closed)
		w.pool.Abandon(func(e *poolEntry) {
			e.client.Close()
			detach(e.vm)
		})
		w.wakes.Abandon(func(sl *wakeSlot) { detach(sl.vm) })
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, sb := range w.sandboxes {
			sb.release()
		}
	})
}

func detach(vm vmm.VM) {
	if d, ok := vm.(vmm.Detacher); ok {
		_ = d.Detach()
	}
}

// BootOriginalDevices makes cold boots get the device set workers had
// before the balloon (as an older worker's did) until the returned func
// is called.
func BootOriginalDevices() (restore func()) {
	bootDeviceSet = deviceSetOriginal
	return func() { bootDeviceSet = currentDeviceSet }
}

// SuspendManifest is the path of sandbox id's suspend snapshot manifest.
func (w *Worker) SuspendManifest(id string) string {
	return filepath.Join(w.dir(id), suspendDir, manifestFile)
}
