package worker

// Simulator is the optional ability of a worker that runs no VMs but
// simulates them (internal/worker/sim), for capacity planning. The API
// shows it on the worker's entry of GET /v1/admin/workers, so a simulated
// worker is never taken for a real one.
type Simulator interface {
	// Simulated is true when the worker's sandboxes are simulated.
	Simulated() bool
}
