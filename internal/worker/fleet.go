package worker

import "context"

// Fleet is the optional ability of a Worker that spans several hosts (the
// cluster's placement): which host each sandbox runs on, and the hosts with
// what they offer. A single host's worker does not have it.
type Fleet interface {
	// HostOf names the host sandbox id's VM is placed on, "" when it is on
	// none (suspended, not placed yet, lost, gone). It answers from what
	// the fleet already knows, without a call to a host.
	HostOf(id string) string
	// Hosts lists the hosts, by name.
	Hosts(ctx context.Context) ([]HostStatus, error)
}

// HostStatus describes one host of a Fleet.
type HostStatus struct {
	Name string
	// Ready is true when the host takes and runs sandboxes now.
	Ready bool
	// Address is where the host's worker is reached ("" when it
	// advertises none).
	Address string
	// Capacity is what the host offers sandboxes; Allocated what the
	// sandboxes placed on it take of that (memory includes each VMM's
	// overhead, as the scheduler counts it).
	Capacity, Allocated Resources
	// Simulated is true for a host whose worker simulates its sandboxes
	// (its node is labelled so; see Simulator).
	Simulated bool
}

// Resources are vCPUs, memory and a sandbox count.
type Resources struct {
	VCPUs     int
	MemoryMiB int
	Sandboxes int
}
