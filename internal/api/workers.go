package api

import (
	"context"
	"net/http"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// sandboxView is a sandbox in wire form. Behind a fleet (a cluster's
// placement) its worker is the host its VM is placed on now, from the
// fleet: absent while suspended or not placed.
func (s *Server) sandboxView(sb *store.Sandbox) apiv1.Sandbox {
	out := toSandbox(sb)
	out.Worker = s.svc.WorkerOf(sb)
	return out
}

// listWorkers is GET /v1/admin/workers: a fleet's hosts, or the one local
// worker with what its sandboxes take.
func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if hosts, fleet, err := s.svc.Hosts(ctx); fleet {
		if err != nil {
			return err
		}
		out := apiv1.WorkerList{Workers: make([]apiv1.Worker, 0, len(hosts))}
		for _, h := range hosts {
			capacity := resourcesOf(h.Capacity)
			wk := apiv1.Worker{Name: h.Name, State: apiv1.WorkerNotReady, Capacity: &capacity,
				Allocated: resourcesOf(h.Allocated), Address: h.Address, Simulated: h.Simulated}
			if h.Ready {
				wk.State = apiv1.WorkerReady
			}
			out.Workers = append(out.Workers, wk)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	wk := apiv1.Worker{Name: s.svc.WorkerID(), State: apiv1.WorkerReady, Simulated: s.svc.WorkerSimulated()}
	if err := s.svc.WorkerReady(ctx); err != nil {
		wk.State = apiv1.WorkerNotReady
		_, info := errorInfo(err)
		wk.Error = info.Message // admins only; still no host paths unless Public
	}
	if a, err := s.svc.Allocated(ctx); err == nil {
		wk.Allocated = resourcesOf(a)
	}
	writeJSON(w, http.StatusOK, apiv1.WorkerList{Workers: []apiv1.Worker{wk}})
	return nil
}

func resourcesOf(r worker.Resources) apiv1.WorkerResources {
	return apiv1.WorkerResources{VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, Sandboxes: r.Sandboxes}
}
