// Package placement is the control plane's worker.Worker in cluster mode:
// it places sandboxes through Kubernetes and holds no placement code of its
// own. CreateSandbox creates the sandbox's Pod (cluster/k8s.SandboxPod) and
// waits, bounded, for kube-scheduler to bind it and the node's worker to
// report it Ready; every later call on the sandbox goes to the worker that
// owns the Pod's node, found from the node's advertised address and
// reached through the Dial function it is given (the worker protocol's
// client). DeleteSandbox deletes the Pod and waits for it to be gone. An
// informer on sandbox Pods turns what Kubernetes decides — a Pod evicted
// from a dead node, deleted from outside, or failed by its worker — into
// worker.Exits.
//
// It must not import the API, store or operation packages: it is the
// Worker contract, seen from the control plane.
package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// Dial returns a client of the worker serving the worker protocol at
// address ("host:port"). Placement keeps one per address and closes them
// on Close.
type Dial func(address string) (worker.Worker, error)

// Config of the control plane's placement.
type Config struct {
	// Namespace of sandbox Pods (k8s.DefaultNamespace when "").
	Namespace string
	// ScheduleTimeout bounds a create's wait for its Pod to be bound and
	// reported Ready (2 minutes when 0). A Pod still unbound then ends the
	// create with ErrResourceExhausted.
	ScheduleTimeout time.Duration
	// DeleteTimeout bounds a delete's wait for its Pod to be gone (1
	// minute when 0); after it the Pod is deleted without grace.
	DeleteTimeout time.Duration
	// TolerationSeconds of sandbox Pods for not-ready and unreachable
	// nodes (k8s.DefaultTolerationSeconds when 0).
	TolerationSeconds int64
	// Dial reaches a worker by its address. Required.
	Dial   Dial
	Logger *slog.Logger
	// DrainTimeout bounds AwaitDrain: how long a sandbox evicted by a
	// node drain may take to be suspended by its worker (15 minutes when
	// 0: a drain grace period, k8s.DefaultDrainGraceSeconds, and more).
	DrainTimeout time.Duration
	// DrainStaysSuspended keeps a sandbox drained off its node suspended
	// (the drain policy "suspend"); by default (policy "wake") one that
	// was running is woken at once on another worker.
	DrainStaysSuspended bool
	// DrainGraceSeconds is the termination grace period of sandbox Pods,
	// what an eviction gives their worker to suspend them
	// (k8s.DefaultDrainGraceSeconds when 0). The control plane's own
	// deletes give them a second.
	DrainGraceSeconds int64
	// Snapshots, when set, is the object store workers upload snapshots
	// to: checkpoints are listed and deleted there and a branch is placed
	// by the scheduler (checkpoints.go); a suspend ends the sandbox's Pod
	// and a wake makes a new one on any worker (suspend.go). Nil keeps
	// each checkpoint and suspend snapshot on the worker that made it.
	Snapshots SnapshotStore
}

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = k8s.DefaultNamespace
	}
	if c.ScheduleTimeout == 0 {
		c.ScheduleTimeout = 2 * time.Minute
	}
	if c.DeleteTimeout == 0 {
		c.DeleteTimeout = time.Minute
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = defaultDrainFor // drain.go
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Placement is a worker.Worker whose sandboxes are Pods.
type Placement struct {
	client kubernetes.Interface
	cfg    Config
	log    *slog.Logger
	pods   corev1listers.PodLister
	nodes  corev1listers.NodeLister
	stop   context.CancelFunc
	done   sync.WaitGroup
	exits  *exitQueue

	mu       sync.Mutex
	workers  map[string]worker.Worker // dialled, by address
	watchers map[string][]chan struct{}
	creating map[string]bool          // sandbox ids whose create waits: it reports their fate
	deleting map[string]chan struct{} // sandbox ids being deleted: closed when the Pod is gone
	lost     map[string]string        // sandbox ids lost, with why (tenant words)
	// evictedPods are Pods seen marked by the Eviction API, drainEnds the
	// last state of drained Pods that are gone (drain.go).
	evictedPods map[types.UID]time.Time
	drainEnds   map[string]*corev1.Pod
	closed      bool
}

var _ worker.Worker = (*Placement)(nil)

// New starts the informers on sandbox Pods and worker nodes and returns
// once their caches are synced (bounded by ctx).
func New(ctx context.Context, client kubernetes.Interface, cfg Config) (*Placement, error) {
	cfg = cfg.withDefaults()
	if cfg.Dial == nil {
		return nil, fmt.Errorf("placement: no Dial: %w", errdefs.ErrInvalidArgument)
	}
	runCtx, stop := context.WithCancel(context.Background())
	p := &Placement{client: client, cfg: cfg, log: cfg.Logger, stop: stop, exits: newExitQueue(),
		workers: map[string]worker.Worker{}, watchers: map[string][]chan struct{}{}, creating: map[string]bool{},
		deleting: map[string]chan struct{}{}, lost: map[string]string{},
		evictedPods: map[types.UID]time.Time{}, drainEnds: map[string]*corev1.Pod{}}
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = k8s.LabelSandbox }))
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{k8s.LabelWorker: "true"}.String()
		}))
	podInformer := podFactory.Core().V1().Pods()
	nodeInformer := nodeFactory.Core().V1().Nodes()
	p.pods, p.nodes = podInformer.Lister(), nodeInformer.Lister()
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: p.podAdded, UpdateFunc: p.podUpdated, DeleteFunc: p.podDeleted,
	}); err != nil {
		stop()
		return nil, fmt.Errorf("placement: %w", err)
	}
	podFactory.Start(runCtx.Done())
	nodeFactory.Start(runCtx.Done())
	p.done.Go(func() { p.exits.pump(runCtx) })
	p.done.Go(func() { <-runCtx.Done(); podFactory.Shutdown(); nodeFactory.Shutdown() })
	for typ, ok := range podFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			p.Close()
			return nil, fmt.Errorf("placement: %v informer did not sync: %w", typ, errors.Join(ctx.Err(), errdefs.ErrUnavailable))
		}
	}
	for typ, ok := range nodeFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			p.Close()
			return nil, fmt.Errorf("placement: %v informer did not sync: %w", typ, errors.Join(ctx.Err(), errdefs.ErrUnavailable))
		}
	}
	return p, nil
}

// Ready reports whether some worker node is Ready.
func (p *Placement) Ready(ctx context.Context) error {
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if k8s.NodeReady(n) && !n.Spec.Unschedulable {
			return nil
		}
	}
	return errdefs.New(errdefs.ErrUnavailable, "no worker node is ready (of %d registered)", len(nodes))
}

// Exits delivers one Exit for each sandbox whose Pod Kubernetes took away
// or its worker failed.
func (p *Placement) Exits() <-chan worker.Exit { return p.exits.out }

// Close stops the informers and closes the dialled worker clients. The
// sandboxes and their Pods stay.
func (p *Placement) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ws := p.workers
	p.workers = map[string]worker.Worker{}
	p.mu.Unlock()
	p.stop()
	p.done.Wait()
	var errs []error
	for _, w := range ws {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

// NetworkLog and SetNetworkPolicy go to the sandbox's worker.
func (p *Placement) SetNetworkPolicy(ctx context.Context, id string, policy json.RawMessage) error {
	w, err := p.owner(id)
	if err != nil {
		return err
	}
	return w.SetNetworkPolicy(ctx, id, policy)
}

func (p *Placement) NetworkLog(ctx context.Context, id string) ([]worker.NetworkRecord, error) {
	w, err := p.owner(id)
	if err != nil {
		return nil, err
	}
	return w.NetworkLog(ctx, id)
}

// Agent is the sandbox's Guest, from the worker that owns it.
func (p *Placement) Agent(ctx context.Context, id string) (worker.Guest, error) {
	w, err := p.owner(id)
	if err != nil {
		return nil, err
	}
	return w.Agent(ctx, id)
}
