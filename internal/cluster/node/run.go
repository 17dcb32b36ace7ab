package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vkslog "github.com/virtual-kubelet/virtual-kubelet/log/slog"
	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/space-sandbox/space/internal/worker"
)

// Run registers the worker's node and runs the sandbox Pods bound to it
// until ctx ends or a controller fails. It returns once everything it
// started has stopped. The Node object and the sandboxes stay: the node's
// Lease is no longer renewed, so Kubernetes sees the node go NotReady, and
// a new Run adopts the sandboxes whose Pods are still bound here.
func Run(ctx context.Context, client kubernetes.Interface, w worker.Worker, cfg Config) error {
	cfg = cfg.withDefaults()
	ip, port, err := cfg.validate()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctx = vklog.WithLogger(ctx, vkslog.FromSlog(cfg.Logger.With("node", cfg.NodeName)))

	status := newNodeStatus(ctx, w, cfg, newNodeObject(cfg, ip, port))
	nodes := client.CoreV1().Nodes()
	renew := cfg.LeaseDuration / 4
	nc, err := vknode.NewNodeController(status, status.current(), nodes,
		vknode.WithNodeEnableLeaseV1WithRenewInterval(client.CoordinationV1().Leases(corev1.NamespaceNodeLease), int32(cfg.LeaseDuration.Seconds()), renew),
		vknode.WithNodePingInterval(renew),
		vknode.WithNodeStatusUpdateInterval(cfg.StatusInterval),
		vknode.WithNodeStatusUpdateErrorHandler(func(ctx context.Context, err error) error {
			if !apierrors.IsNotFound(err) {
				return err
			}
			// Someone deleted the Node: register it again.
			cfg.Logger.Warn("node object was deleted; registering again", "node", cfg.NodeName)
			_, err = nodes.Create(ctx, status.current(), metav1.CreateOptions{})
			return err
		}),
	)
	if err != nil {
		return fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}

	handler := newPodHandler(w, cfg, ip, client.CoreV1())
	if err := handler.loadWorker(ctx); err != nil {
		return fmt.Errorf("node %s: list the worker's sandboxes: %w", cfg.NodeName, err)
	}
	bound := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	// virtual-kubelet wants ConfigMap, Secret and Service informers for
	// the downward API, which sandbox Pods do not use
	// (SkipDownwardAPIResolution): they are never started, so a worker
	// needs no right to read Secrets.
	unused := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace))
	events := record.NewBroadcaster(record.WithContext(ctx))
	defer events.Shutdown()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	pc, err := vknode.NewPodController(vknode.PodControllerConfig{
		PodClient:                 client.CoreV1(),
		PodInformer:               bound.Core().V1().Pods(),
		EventRecorder:             events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: workerVersion, Host: cfg.NodeName}),
		Provider:                  handler,
		ConfigMapInformer:         unused.Core().V1().ConfigMaps(),
		SecretInformer:            unused.Core().V1().Secrets(),
		ServiceInformer:           unused.Core().V1().Services(),
		SkipDownwardAPIResolution: true,
	})
	if err != nil {
		return fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	run := func(name string, fn func() error) {
		wg.Go(func() {
			if err := fn(); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("node %s: %s: %w", cfg.NodeName, name, err)
			}
			cancel()
		})
	}
	run("node controller", func() error { return nc.Run(ctx) })
	select {
	case <-nc.Ready():
	case <-nc.Done():
		wg.Wait()
		return errors.Join(nc.Err(), firstErr(errs))
	}
	// The node's own look at Pod updates: an eviction's condition, which
	// its status writes would otherwise replace (drain.go).
	if _, err := bound.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: handler.podSeen}); err != nil {
		cancel()
		wg.Wait()
		return fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	bound.Start(ctx.Done())
	run("pod controller", func() error { return pc.Run(ctx, cfg.Workers) })
	wg.Go(func() { handler.resync(ctx) })
	cfg.Logger.Info("worker node registered", "node", cfg.NodeName, "address", cfg.Address)
	<-ctx.Done()
	wg.Wait()
	bound.Shutdown()
	return firstErr(errs)
}

func firstErr(errs chan error) error {
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
