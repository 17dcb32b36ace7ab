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
		if p := w.pool; p != nil {
			p.cancel()
			<-p.done
			p.mu.Lock()
			for _, es := range p.ready {
				for _, e := range es {
					e.client.Close()
					if d, ok := e.vm.(vmm.Detacher); ok {
						_ = d.Detach()
					}
				}
			}
			p.ready = map[string][]*poolEntry{}
			p.mu.Unlock()
		}
		if p := w.wakes; p != nil {
			p.cancel()
			<-p.done
			p.mu.Lock()
			for _, ss := range p.ready {
				for _, sl := range ss {
					if d, ok := sl.vm.(vmm.Detacher); ok {
						_ = d.Detach()
					}
				}
			}
			p.ready = map[wakeShape][]*wakeSlot{}
			p.mu.Unlock()
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, sb := range w.sandboxes {
			sb.release()
		}
	})
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
