package server

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/cluster/node"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// NodeConfig is how `spaced worker` registers its host with Kubernetes as
// a node (internal/cluster/node). Registration is on when Kubeconfig is
// set; without it the worker only serves the protocol.
type NodeConfig struct {
	// Kubeconfig is the kubeconfig file of the cluster to join.
	Kubeconfig string
	// NodeName is the Node's name (default space-<hostname>).
	NodeName string
	// Namespace is where sandbox Pods live.
	Namespace string
	// AdvertiseAddress is the IP the control plane dials: the node's
	// InternalIP. Empty: the --listen host, which must then be a specific
	// address (not 0.0.0.0 or ::).
	AdvertiseAddress string
	// KubeRate bounds this worker's requests to the Kubernetes API.
	KubeRate KubeRate
	// What the worker offers: the node's capacity and allocatable.
	VCPUs, MemoryMiB, Sandboxes int
	// VCPUOvercommit is the ratio of sandbox vCPUs to the host's VCPUs the
	// node advertises (its cpu capacity is VCPUs × VCPUOvercommit);
	// memory is not overcommitted.
	VCPUOvercommit float64
	// LeaseDuration is the node Lease's duration (renewed every quarter).
	LeaseDuration time.Duration
	// DrainConcurrency bounds this node's sandboxes suspending at once
	// for a drain (node.DefaultDrainConcurrency when 0).
	DrainConcurrency int
	// ObjectStore says the worker suspends to object storage (set from
	// --object-store), so a drain can move its sandboxes.
	ObjectStore bool
	// Control is the control plane's URL (--control; docs/kubernetes.md), or
	// several, comma-separated, tried in turn. The worker learns its work
	// from the Pods bound to its node and the control plane dials it; the
	// one call the worker makes is ResolveSecret, for the egress proxy's
	// ${secret:NAME} (worker_secrets.go). Empty: no secret resolves here.
	Control string
	// Simulated labels the node a simulated worker's (--simulate), so
	// neither an operator nor the API takes it for a real host.
	Simulated bool
	// ControlCAFile is the PEM CA an https:// Control's certificate chains
	// to (empty: the system's roots).
	ControlCAFile string
}

// DefaultVCPUOvercommit is --vcpu-overcommit's default: agent sandboxes
// mostly sit idle waiting for their next command, so four of them share a
// host vCPU well; a fleet of busy ones wants less (docs/kubernetes.md).
const DefaultVCPUOvercommit = 4

// registerNodeFlags adds the node flags of `spaced worker` to fs.
func registerNodeFlags(fs *flag.FlagSet, c *NodeConfig) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to register this host with as a node (empty: no registration)")
	fs.StringVar(&c.NodeName, "node-name", "", "the node's name (default space-<hostname>)")
	registerKubeRateFlags(fs, &c.KubeRate, DefaultWorkerKubeRate)
	fs.StringVar(&c.Namespace, "namespace", k8s.DefaultNamespace, "namespace of the sandbox Pods")
	fs.StringVar(&c.AdvertiseAddress, "advertise-address", "", "IP the control plane dials (default: the --listen host; required when that is 0.0.0.0 or ::)")
	fs.IntVar(&c.VCPUs, "vcpus", runtime.NumCPU(), "vCPUs this worker offers to sandboxes")
	fs.Float64Var(&c.VCPUOvercommit, "vcpu-overcommit", DefaultVCPUOvercommit,
		"sandbox vCPUs placed per host vCPU: the node advertises --vcpus times this as its cpu capacity (1: none; memory is never overcommitted)")
	fs.IntVar(&c.MemoryMiB, "memory-mib", hostMemoryMiB(), "memory (MiB) this worker offers to sandboxes")
	fs.IntVar(&c.Sandboxes, "sandboxes", 32, "sandboxes this worker runs at most")
	fs.DurationVar(&c.LeaseDuration, "node-lease", 40*time.Second, "duration of the node's Lease (renewed every quarter of it)")
	fs.IntVar(&c.DrainConcurrency, "drain-concurrency", node.DefaultDrainConcurrency,
		"sandboxes of this node suspended to object storage at once when its node is drained; the other evicted Pods wait their turn")
	fs.StringVar(&c.ControlCAFile, "control-ca-file", "", "PEM CA of the control plane's TLS certificate, for https:// --control URLs (default: the system's roots)")
	fs.StringVar(&c.Control, "control", "", "URL of the control plane, or several comma-separated, where the egress proxy resolves tenants' ${secret:NAME} (needs --kubeconfig; empty: none resolve)")
}

// validate checks the node flags at the edge (only when registration is on).
func (c *NodeConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	for _, raw := range c.controlURLs() {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("--control %q is not an http(s) URL", raw)
		}
	}
	if c.Kubeconfig == "" {
		return nil
	}
	if c.NodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node-name: hostname: %w", err)
		}
		if c.NodeName, err = k8s.NodeName(host); err != nil {
			return err
		}
	}
	if errs := validation.IsDNS1123Subdomain(c.NodeName); len(errs) > 0 {
		return bad("--node-name %q: %s", c.NodeName, strings.Join(errs, "; "))
	}
	if c.AdvertiseAddress != "" && net.ParseIP(c.AdvertiseAddress) == nil {
		return bad("--advertise-address %q is not an IP address", c.AdvertiseAddress)
	}
	if c.VCPUs < 1 || c.MemoryMiB < 1 || c.Sandboxes < 1 {
		return bad("--vcpus (%d), --memory-mib (%d) and --sandboxes (%d) must be positive", c.VCPUs, c.MemoryMiB, c.Sandboxes)
	}
	if c.VCPUOvercommit < 1 || c.VCPUOvercommit > node.MaxVCPUOvercommit {
		return bad("--vcpu-overcommit %g must be between 1 and %d", c.VCPUOvercommit, node.MaxVCPUOvercommit)
	}
	if err := c.KubeRate.validate(); err != nil {
		return bad("%v", err)
	}
	if c.LeaseDuration < 4*time.Second {
		return bad("--node-lease %s is below 4s", c.LeaseDuration)
	}
	if c.DrainConcurrency < 1 {
		return bad("--drain-concurrency %d must be positive", c.DrainConcurrency)
	}
	return nil
}

// controlURLs are the URLs of --control.
func (c *NodeConfig) controlURLs() []string {
	var out []string
	for u := range strings.SplitSeq(c.Control, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// nodeAddress is the worker-protocol address the node advertises: the
// advertise address (or the listener's IP) and the listener's port.
func (c *NodeConfig) nodeAddress(ln net.Addr) (string, error) {
	host, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return "", err
	}
	if c.AdvertiseAddress != "" {
		host = c.AdvertiseAddress
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return "", fmt.Errorf("the worker listens on %s, which the control plane cannot dial: pass --advertise-address: %w",
			ln.String(), errdefs.ErrInvalidArgument)
	}
	return net.JoinHostPort(host, port), nil
}

// serveWorkerAndNode serves the worker protocol on ln and, when node
// registration is on, runs the worker's node beside it, until ctx ends or
// either fails (then both stop).
func serveWorkerAndNode(ctx context.Context, w worker.Worker, ln net.Listener, opts WorkerServing, nc NodeConfig) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if nc.Kubeconfig == "" {
		return ServeWorker(ctx, w, ln, opts)
	}
	addr, err := nc.nodeAddress(ln.Addr())
	if err != nil {
		ln.Close()
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", nc.Kubeconfig)
	if err != nil {
		ln.Close()
		return fmt.Errorf("--kubeconfig %s: %w", nc.Kubeconfig, err)
	}
	rc.UserAgent = "spaced-worker/" + nc.NodeName
	nc.KubeRate.apply(rc)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		ln.Close()
		return fmt.Errorf("kubernetes client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var nodeErr error
	wg.Go(func() {
		defer cancel()
		nodeErr = node.Run(ctx, client, w, node.Config{
			NodeName: nc.NodeName, Address: addr, Namespace: nc.Namespace,
			VCPUs: nc.VCPUs, VCPUOvercommit: nc.VCPUOvercommit, MemoryMiB: nc.MemoryMiB, Sandboxes: nc.Sandboxes,
			LeaseDuration: nc.LeaseDuration, DrainConcurrency: nc.DrainConcurrency, ObjectStore: nc.ObjectStore, Simulated: nc.Simulated,
			Logger: opts.Logger.With("component", "node"),
		})
	})
	opts.Logger.Info("registering this worker as a Kubernetes node", "node", nc.NodeName, "address", addr,
		"namespace", nc.Namespace, "vcpus", nc.VCPUs, "vcpu_overcommit", nc.VCPUOvercommit, "memory_mib", nc.MemoryMiB, "sandboxes", nc.Sandboxes,
		"drain_concurrency", nc.DrainConcurrency, "drain_moves_sandboxes", nc.ObjectStore, "simulated", nc.Simulated)
	serveErr := ServeWorker(ctx, w, ln, opts)
	cancel()
	wg.Wait()
	if nodeErr != nil && !errors.Is(nodeErr, context.Canceled) {
		return errors.Join(nodeErr, serveErr)
	}
	return serveErr
}

// hostMemoryMiB is MemTotal from /proc/meminfo in MiB (1024 when unknown),
// the default memory a worker offers.
func hostMemoryMiB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 1024
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			if kib, err := strconv.Atoi(fields[1]); err == nil && kib >= 1024 {
				return kib / 1024
			}
		}
	}
	return 1024
}
