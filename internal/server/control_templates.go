package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// workerBuilds is the control plane's template builder in cluster mode:
// every build, base included, runs on a worker over the worker protocol
// (BuildTemplate), so a control replica needs no root, no mmdebstrap and
// no agent. The worker publishes the image to object storage by digest
// before it answers; the workers' ready snapshots and creates fetch it
// from there as before.
//
// The worker is the least loaded Ready one (fewest vCPUs requested by its
// sandbox Pods for what it offers), not one kube-scheduler picks for a
// build Pod: a build uses the host's tools and disk, not the sandbox
// capacity a Pod would hold for it, and the node informer already says
// who is Ready and how loaded. A worker that cannot be reached gives the
// build to the next.
type workerBuilds struct {
	fleet worker.Fleet
	dial  placement.Dial
	obj   *objstore.Store
	admin bool
	// sourceRoots are where a path source may be on the control plane's
	// host (<data-dir>/imports and --template-source-root), as for one node.
	sourceRoots   []string
	registryAllow []string
	log           *slog.Logger
}

var _ sandbox.TemplateBuilder = (*workerBuilds)(nil)

// buildAttempts bounds how many workers one build is given to.
const buildAttempts = 2

// Build implements sandbox.TemplateBuilder. A path source (a tar) is read
// here, under the source roots, and handed to the worker through object
// storage; a directory source is refused: only files travel.
func (b *workerBuilds) Build(ctx context.Context, req template.BuildRequest, progress template.ProgressFunc, buildLog io.Writer) (template.Metadata, error) {
	tb := remote.TemplateBuild{Request: req, Admin: b.admin, RegistryAllow: b.registryAllow}
	if req.Source.Path != "" {
		name, drop, err := b.uploadSource(ctx, req.Source.Path)
		if err != nil {
			return template.Metadata{}, err
		}
		defer drop()
		tb.SourceObject = name
	}
	return b.onWorker(ctx, tb, progress, buildLog)
}

// Delete implements sandbox.TemplateBuilder: the control plane keeps no
// build files; the workers' copies go with ForgetTemplate, the image in
// object storage stays for the object store's GC (another build of the
// same digest may share it).
func (b *workerBuilds) Delete(context.Context, string) error { return nil }

// base has a worker publish its base template and returns it.
func (b *workerBuilds) base(ctx context.Context) (template.Metadata, error) {
	return b.onWorker(ctx, remote.TemplateBuild{Base: true}, nil, nil)
}

// templateBuilder is what BuildTemplate is called on (*remote.Client).
type templateBuilder interface {
	BuildTemplate(ctx context.Context, b remote.TemplateBuild, progress template.ProgressFunc, log io.Writer) (template.Metadata, error)
}

func (b *workerBuilds) onWorker(ctx context.Context, tb remote.TemplateBuild, progress template.ProgressFunc, buildLog io.Writer) (template.Metadata, error) {
	hosts, err := b.fleet.Hosts(ctx)
	if err != nil {
		return template.Metadata{}, errdefs.New(errdefs.ErrUnavailable, "the workers cannot be listed now").WithCause(err)
	}
	hosts = readyByLoad(hosts)
	if len(hosts) == 0 {
		return template.Metadata{}, errdefs.New(errdefs.ErrUnavailable, "no worker is ready to build templates")
	}
	for i, h := range hosts[:min(len(hosts), buildAttempts)] {
		w, err := b.dial(h.Address)
		if err != nil {
			err = errdefs.New(errdefs.ErrUnavailable, "the build's worker cannot be reached").WithCause(err)
			if i+1 < min(len(hosts), buildAttempts) {
				continue
			}
			return template.Metadata{}, err
		}
		tbw, ok := w.(templateBuilder)
		if !ok {
			w.Close()
			return template.Metadata{}, fmt.Errorf("the worker client builds no templates: %w", errdefs.ErrInternal)
		}
		b.log.InfoContext(ctx, "template build on a worker", "worker", h.Name, "template", tb.Request.Name, "base", tb.Base)
		m, err := tbw.BuildTemplate(ctx, tb, progress, buildLog)
		w.Close()
		if err == nil || errdefs.ClassOf(err) != errdefs.ErrUnavailable || ctx.Err() != nil || i+1 >= min(len(hosts), buildAttempts) {
			return m, err
		}
		b.log.WarnContext(ctx, "template build's worker failed; giving it to another", "worker", h.Name, "err", err)
	}
	return template.Metadata{}, errdefs.New(errdefs.ErrUnavailable, "no worker could build the template")
}

// readyByLoad is the Ready hosts with an address, least loaded first.
func readyByLoad(hosts []worker.HostStatus) []worker.HostStatus {
	var out []worker.HostStatus
	for _, h := range hosts {
		if h.Ready && h.Address != "" {
			out = append(out, h)
		}
	}
	load := func(h worker.HostStatus) float64 {
		return float64(h.Allocated.VCPUs) / float64(max(h.Capacity.VCPUs, 1))
	}
	sort.SliceStable(out, func(i, j int) bool {
		if li, lj := load(out[i]), load(out[j]); li != lj {
			return li < lj
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// uploadSource puts the source file at path (under a source root, a
// regular file) in object storage for the build's worker; drop removes
// it again.
func (b *workerBuilds) uploadSource(ctx context.Context, path string) (name string, drop func(), err error) {
	real, err := b.sourceFile(path)
	if err != nil {
		return "", nil, err
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	name = "template-sources/" + hex.EncodeToString(r[:])
	if _, err := b.obj.PutSnapshot(ctx, name, filepath.Dir(real), []string{filepath.Base(real)}); err != nil {
		return "", nil, errdefs.New(errdefs.ErrUnavailable, "the template source could not be handed to a worker").WithCause(err)
	}
	return name, func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := b.obj.DeleteSnapshot(dctx, name); err != nil {
			b.log.Warn("template source left in object storage", "object", name, "err", err)
		}
	}, nil
}

// sourceFile resolves path (symlinks too) and checks it is a regular file
// under a source root, as a single node's builder would.
func (b *workerBuilds) sourceFile(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "template source path %q must be absolute", path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "template source path %q cannot be read", path)
	}
	inRoot := false
	for _, root := range b.sourceRoots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(r, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			inRoot = true
			break
		}
	}
	if !inRoot {
		return "", errdefs.New(errdefs.ErrPermissionDenied, "template source path %q is not under a directory builds may read", path)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "template source path %q cannot be read", path)
	}
	if !fi.Mode().IsRegular() {
		return "", errdefs.New(errdefs.ErrFailedPrecondition,
			"template source path %q is not a file: in cluster mode a path source must be a tar (builds run on a worker)", path)
	}
	return real, nil
}

// replicaTemplates is the template builds of a control replica. With
// --object-store they run on the workers (base included, recorded in the
// background once a worker publishes it). Without one a worker could not
// fetch a build anyway: the replica builds here as before (root and the
// agent needed, base only when it has them).
func replicaTemplates(ctx context.Context, cfg ControlConfig, db store.Store, pl *placement.Placement, dial placement.Dial,
	obj *objstore.Store, td *teardown, log *slog.Logger) (sandbox.TemplateDeps, error) {
	if obj == nil {
		templatesDir := filepath.Join(cfg.DataDir, "templates")
		registerBaseTemplate(ctx, cfg.Config, db, templatesDir, nil, log)
		return templateBuilders(cfg.Config, templatesDir, log)
	}
	tpls, builds, err := workerTemplateDeps(cfg, pl, dial, obj, log)
	if err != nil {
		return sandbox.TemplateDeps{}, err
	}
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); registerBaseFromWorkers(bctx, db, builds, log) }()
	td.add(func() { stop(); <-done })
	return tpls, nil
}

// workerTemplateDeps is the template builds of a replica on the workers,
// logs in <data-dir>/template-logs.
func workerTemplateDeps(cfg ControlConfig, pl *placement.Placement, dial placement.Dial, obj *objstore.Store,
	log *slog.Logger) (sandbox.TemplateDeps, *workerBuilds, error) {
	imports := filepath.Join(cfg.DataDir, "imports")
	if err := os.MkdirAll(imports, 0o755); err != nil {
		return sandbox.TemplateDeps{}, nil, fmt.Errorf("template imports dir: %w", err)
	}
	mk := func(admin bool) *workerBuilds {
		return &workerBuilds{fleet: pl, dial: dial, obj: obj, admin: admin,
			sourceRoots: append([]string{imports}, cfg.TemplateSourceRoots...), registryAllow: cfg.TemplateRegistryAllow,
			log: log.With("component", "template-builds")}
	}
	tenants := mk(false)
	return sandbox.TemplateDeps{Builder: tenants, AdminBuilder: mk(true), LogDir: filepath.Join(cfg.DataDir, "template-logs")},
		tenants, nil
}

// registerBaseFromWorkers records the base template a worker publishes,
// retrying until one does (workers may join after the replica starts) or
// ctx ends. Until then a create of base reads not_found.
func registerBaseFromWorkers(ctx context.Context, db store.Store, b *workerBuilds, log *slog.Logger) {
	for wait := 2 * time.Second; ; wait = min(wait*2, 10*time.Second) {
		bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		m, err := b.base(bctx)
		cancel()
		if err == nil {
			if err = registerTemplate(ctx, db, m); err == nil {
				log.Info("base template published by a worker and recorded", "template", m.Ref())
				return
			}
		}
		log.Info("base template not recorded yet; retrying", "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
