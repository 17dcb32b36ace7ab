// Package node registers a SPACE worker's host with Kubernetes as a node of
// its own, in the virtual-kubelet style, and runs exactly the sandbox Pods
// kube-scheduler binds to it. virtual-kubelet's NodeController keeps the
// Node object (labels, taint, capacity, the Ready condition from the
// worker's Ready) and renews its Lease in kube-node-lease; its
// PodController feeds the Pods bound to the node to this package's handler,
// which creates, adopts and deletes the sandboxes on the local worker and
// reports each Pod's status (Running and Ready when the sandbox is up,
// Failed with a tenant-safe reason when it cannot be made or its VM stops).
//
// It never reads worker.Exits: that channel belongs to whoever serves the
// worker protocol; a VM that stops is seen by polling the worker's status.
// It must not import the API, store or operation packages.
package node

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
)

// Config describes one worker's node.
type Config struct {
	// NodeName is the node's name, k8s.NodeName(host) ("space-<host>").
	NodeName string
	// Address is the worker protocol's "ip:port": the IP becomes the node's
	// InternalIP, the port its k8s.AnnotationWorkerPort.
	Address string
	// What the worker offers to sandboxes: the node's capacity and
	// allocatable (Sandboxes is its "pods"). VCPUs are the host's; the
	// node advertises VCPUs × VCPUOvercommit of cpu (1 when 0: none), as
	// idle agent sandboxes leave their vCPUs mostly unused. Memory is
	// never overcommitted: a guest's RAM is the host's.
	VCPUs          int
	VCPUOvercommit float64
	MemoryMiB      int
	Sandboxes      int
	// Namespace is where sandbox Pods live (k8s.DefaultNamespace when "").
	// A Pod bound to this node in any other namespace is failed, not run.
	Namespace string
	// LeaseDuration is the node Lease's duration (40s when 0, as a
	// kubelet's); it is renewed every quarter of it.
	LeaseDuration time.Duration
	// StatusInterval is how often the node's status is written even when
	// nothing changed (1 minute when 0), and ReadyInterval how often the
	// worker's Ready is asked (10s when 0); a change is written at once.
	StatusInterval time.Duration
	ReadyInterval  time.Duration
	// ResyncInterval is how often the worker's view of each sandbox is read
	// back into its Pod's status (5s when 0): a VM that stopped fails its Pod.
	ResyncInterval time.Duration
	// CreateTimeout bounds one sandbox creation on the worker (10 minutes
	// when 0).
	CreateTimeout time.Duration
	// Workers is how many Pods are synced at once (8 when 0).
	Workers int
	// DrainConcurrency bounds the sandboxes of this node suspending at
	// once for a drain (DefaultDrainConcurrency when 0); the other evicted
	// Pods wait their turn, terminating (drain.go).
	DrainConcurrency int
	// DrainSuspendTimeout bounds one drain suspend (10 minutes when 0).
	DrainSuspendTimeout time.Duration
	// ObjectStore says the worker suspends to object storage, so an
	// evicted sandbox can move; without it a drain fails its sandboxes.
	ObjectStore bool
	// Simulated labels the node k8s.LabelSimulated: its worker simulates
	// its sandboxes (internal/worker/sim), it runs no VMs.
	Simulated bool
	// Drains, when set, is where the node keeps its account of drain
	// suspends (a fresh record when nil).
	Drains *DrainRecord
	Logger *slog.Logger
}

// MaxVCPUOvercommit bounds Config.VCPUOvercommit: past it a busy fleet's
// vCPUs would each get a sliver of a core.
const MaxVCPUOvercommit = 16

// DefaultDrainConcurrency is how many sandboxes of one node suspend at
// once for a drain unless configured: two keep the node's disk and
// uplink busy without one tenant's large sandbox holding up the rest.
const DefaultDrainConcurrency = 2

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = k8s.DefaultNamespace
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 40 * time.Second
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = time.Minute
	}
	if c.ReadyInterval == 0 {
		c.ReadyInterval = 10 * time.Second
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = 5 * time.Second
	}
	if c.CreateTimeout == 0 {
		c.CreateTimeout = 10 * time.Minute
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.DrainConcurrency == 0 {
		c.DrainConcurrency = DefaultDrainConcurrency
	}
	if c.DrainSuspendTimeout == 0 {
		c.DrainSuspendTimeout = 10 * time.Minute
	}
	if c.Drains == nil {
		c.Drains = &DrainRecord{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks the config at the edge: ErrInvalidArgument naming the
// first bad field.
func (c Config) validate() (ip string, port int, err error) {
	bad := func(format string, args ...any) (string, int, error) {
		return "", 0, fmt.Errorf("node config: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	if c.NodeName == "" {
		return bad("no node name")
	}
	host, p, err := net.SplitHostPort(c.Address)
	if err != nil {
		return bad("address %q: %v", c.Address, err)
	}
	if net.ParseIP(host) == nil {
		return bad("address %q: the host must be an IP address (it becomes the node's InternalIP)", c.Address)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return bad("address %q: bad port", c.Address)
	}
	if c.VCPUs < 1 || c.MemoryMiB < 1 || c.Sandboxes < 1 {
		return bad("vcpus %d, memory_mib %d and sandboxes %d must all be positive", c.VCPUs, c.MemoryMiB, c.Sandboxes)
	}
	if c.VCPUOvercommit != 0 && (c.VCPUOvercommit < 1 || c.VCPUOvercommit > MaxVCPUOvercommit) {
		return bad("vcpu overcommit %g must be between 1 and %d", c.VCPUOvercommit, MaxVCPUOvercommit)
	}
	if c.DrainConcurrency < 1 {
		return bad("drain concurrency %d must be positive", c.DrainConcurrency)
	}
	if c.LeaseDuration < 4*time.Second {
		return bad("lease duration %s is below 4s", c.LeaseDuration)
	}
	return host, port, nil
}
