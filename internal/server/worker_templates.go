package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker/local"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// workerTemplates builds templates on this worker for a cluster's control
// plane (the worker protocol's BuildTemplate): the worker has root,
// mmdebstrap and the agent, a control replica need have none of them.
// Each build goes to object storage by digest before the call answers
// and is then removed here: every worker, this one included, fetches it
// from there on first use, as it does any template a replica recorded.
type workerTemplates struct {
	cfg          WorkerConfig
	templatesDir string // the worker's own: where base is
	buildsDir    string // where builds for the control plane are made
	imports      string // where source files from the control plane land
	base         template.Metadata
	obj          *objstore.Store
	log          *slog.Logger
}

var _ remote.TemplateBuilder = (*workerTemplates)(nil)

// newWorkerTemplates returns the worker's template builds, or nil (the
// call refused) when the worker has no object store to publish them to.
func newWorkerTemplates(cfg WorkerConfig, h *host, snapshots local.SnapshotStore, log *slog.Logger) (*workerTemplates, error) {
	sn, ok := snapshots.(objstore.Snapshots)
	if !ok || sn.Store == nil {
		return nil, nil
	}
	imports := filepath.Join(cfg.DataDir, "imports")
	if err := os.MkdirAll(imports, 0o700); err != nil {
		return nil, fmt.Errorf("template imports dir: %w", err)
	}
	buildsDir := filepath.Join(cfg.DataDir, "template-builds")
	if err := os.MkdirAll(buildsDir, 0o700); err != nil {
		return nil, fmt.Errorf("template builds dir: %w", err)
	}
	return &workerTemplates{cfg: cfg, templatesDir: h.templatesDir, buildsDir: buildsDir, imports: imports, base: h.base, obj: sn.Store,
		log: log.With("component", "template-builds")}, nil
}

// BuildTemplate implements remote.TemplateBuilder.
func (w *workerTemplates) BuildTemplate(ctx context.Context, b remote.TemplateBuild, progress template.ProgressFunc, buildLog io.Writer) (template.Metadata, error) {
	m, dir := w.base, w.templatesDir
	if !b.Base {
		builder, err := template.NewBuilder(template.BuilderConfig{TemplatesDir: w.buildsDir, AgentBinary: w.cfg.AgentBinary,
			SourceRoots: []string{w.imports}, RegistryAllow: b.RegistryAllow, AllowScripts: b.Admin, Logger: w.log})
		if err != nil {
			return template.Metadata{}, err
		}
		if m, err = w.build(ctx, builder, b, progress, buildLog); err != nil {
			return template.Metadata{}, err
		}
		defer func() {
			if err := builder.Delete(context.WithoutCancel(ctx), m.Ref()); err != nil {
				w.log.Warn("template build left on the worker", "template", m.Ref(), "err", err)
			}
		}()
		dir = w.buildsDir
	}
	if err := publishImage(w.obj)(ctx, template.BuildDir(dir, m.Name, m.Digest), m); err != nil {
		return template.Metadata{}, errdefs.New(errdefs.ErrUnavailable, "the built image could not be stored in object storage").WithCause(err)
	}
	w.log.InfoContext(ctx, "template built for the control plane and published", "template", m.Ref(), "base", b.Base)
	return m, nil
}

func (w *workerTemplates) build(ctx context.Context, builder *template.Builder, b remote.TemplateBuild, progress template.ProgressFunc, buildLog io.Writer) (template.Metadata, error) {
	req := b.Request
	if b.SourceObject != "" {
		dir, err := os.MkdirTemp(w.imports, "source-")
		if err != nil {
			return template.Metadata{}, fmt.Errorf("source dir: %w", errors.Join(errdefs.ErrInternal, err))
		}
		defer os.RemoveAll(dir)
		man, err := w.obj.GetSnapshot(ctx, b.SourceObject, dir)
		if err != nil {
			return template.Metadata{}, errdefs.New(errdefs.ErrUnavailable, "the build's source could not be read from object storage").WithCause(err)
		}
		if len(man.Files) != 1 {
			return template.Metadata{}, errdefs.New(errdefs.ErrInvalidArgument, "the build's source object holds %d files, not one", len(man.Files))
		}
		req.Source.Path = filepath.Join(dir, man.Files[0].Name)
	}
	m, err := builder.Build(ctx, req, progress, buildLog)
	if err != nil {
		return template.Metadata{}, err
	}
	if b.SourceObject != "" && m.Source != nil {
		m.Source.Path = b.Request.Source.Path // as the tenant named it, not this worker's copy
	}
	return m, nil
}
