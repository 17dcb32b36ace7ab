package template

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/space-sandbox/space/internal/errdefs"
)

// The platform SPACE runs.
const (
	platformOS   = "linux"
	platformArch = "amd64"
)

// resolveOCI opens an OCI source (layout dir, archive tar or registry
// reference) and checks it is a linux/amd64 image.
func (b *Builder) resolveOCI(ctx context.Context, src Source, bs *buildState) (*resolved, error) {
	var (
		img    v1.Image
		digest string
		err    error
	)
	switch {
	case src.Image != "" && src.Path != "":
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "an oci source takes either path or image, not both")
	case src.Image != "":
		img, err = b.pullImage(ctx, src.Image)
	case src.Path != "":
		img, digest, err = b.openOCIPath(ctx, src.Path, bs)
	default:
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "an oci source needs a path (OCI layout or image tar) or an image reference")
	}
	if err != nil {
		return nil, err
	}
	what := src.Image
	if what == "" {
		what = src.Path
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, ociErr(what, "its image config cannot be read", err)
	}
	if (cf.OS != "" && cf.OS != platformOS) || (cf.Architecture != "" && cf.Architecture != platformArch) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "%q is an image for %s/%s; SPACE runs %s/%s images",
			what, cf.OS, cf.Architecture, platformOS, platformArch)
	}
	if digest == "" {
		h, err := img.Digest()
		if err != nil {
			return nil, ociErr(what, "its manifest cannot be read", err)
		}
		digest = h.String()
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, ociErr(what, "its layers cannot be listed", err)
	}
	if len(cf.RootFS.DiffIDs) != 0 && len(cf.RootFS.DiffIDs) != len(layers) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "%q is not a valid image: %d layers but %d diff_ids in its config",
			what, len(layers), len(cf.RootFS.DiffIDs))
	}
	bs.logf("source %s: image %s, %d layers", what, digest, len(layers))

	d, conf := imageDefaults(cf.Config)
	return &resolved{
		digest: digest, defaults: d, config: conf,
		populate: func(ctx context.Context, root string, bs *buildState) error {
			a, err := newApplier(root, &bs.used, bs.limit)
			if err != nil {
				return err
			}
			defer a.Close()
			for i, l := range layers {
				label := fmt.Sprintf("layer %d of %d", i+1, len(layers))
				bs.progress("extract "+label, 5+65*i/len(layers))
				var want v1.Hash
				if len(cf.RootFS.DiffIDs) > 0 {
					want = cf.RootFS.DiffIDs[i]
				}
				if err := applyLayer(ctx, a, l, label, want); err != nil {
					return err
				}
				bs.logf("applied %s", label)
			}
			return nil
		},
	}, nil
}

// applyLayer extracts one layer, checking its uncompressed content against
// the diff_id the config lists (a zero want skips the check).
func applyLayer(ctx context.Context, a *applier, l v1.Layer, label string, want v1.Hash) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return ociErr(label, "it cannot be read", err)
	}
	defer rc.Close()
	h := sha256.New()
	r := io.TeeReader(ctxReader{ctx, rc}, h)
	if err := a.apply(ctx, r, label, true); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil { // the tar's padding counts toward the digest
		if ctx.Err() != nil {
			return fmt.Errorf("template: %s: %w", label, errdefs.ErrCancelled)
		}
		return ociErr(label, "it cannot be read", err)
	}
	if want.Hex != "" && want.Algorithm == "sha256" && hex.EncodeToString(h.Sum(nil)) != want.Hex {
		return errdefs.New(errdefs.ErrInvalidArgument, "%s does not match its diff_id %s: the image is corrupt", label, want)
	}
	return nil
}

// imageDefaults turns an image config's run settings into template defaults.
func imageDefaults(c v1.Config) (Defaults, *ImageConfig) {
	d := Defaults{Env: map[string]string{}, Workdir: c.WorkingDir, User: c.User}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k != "" {
			d.Env[k] = v
		}
	}
	if d.User == "" {
		d.User = "root"
	}
	if d.Workdir == "" {
		d.Workdir = "/"
	}
	var conf *ImageConfig
	if len(c.Entrypoint) > 0 || len(c.Cmd) > 0 {
		conf = &ImageConfig{Entrypoint: c.Entrypoint, Cmd: c.Cmd}
	}
	return d, conf
}

// openOCIPath opens an OCI layout directory, or a tar that is a `docker
// save` archive or an OCI archive. For a tar, digest is its sha256 (the
// manifest of an uncompressed docker archive would have to be computed).
func (b *Builder) openOCIPath(ctx context.Context, p string, bs *buildState) (img v1.Image, digest string, err error) {
	fi, err := b.checkPath(p)
	if err != nil {
		return nil, "", err
	}
	if fi.IsDir() {
		idx, err := layout.ImageIndexFromPath(p)
		if err != nil {
			return nil, "", errdefs.New(errdefs.ErrInvalidArgument, "%q is not an OCI image layout (no readable index.json)", p).WithCause(err)
		}
		img, err := pickImage(idx, p)
		return img, "", err
	}
	if !fi.Mode().IsRegular() {
		return nil, "", errdefs.New(errdefs.ErrInvalidArgument, "%q is neither an OCI image layout directory nor an image tar", p)
	}
	kind, err := archiveKind(p)
	if err != nil {
		return nil, "", errdefs.New(errdefs.ErrInvalidArgument, "%q is not an image tar: %v", p, err).WithCause(err)
	}
	digest, err = fileDigest(ctx, p)
	if err != nil {
		return nil, "", err
	}
	switch kind {
	case "docker":
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			return nil, "", errdefs.New(errdefs.ErrInvalidArgument, "%q is not a usable docker image archive (it must hold exactly one image)", p).WithCause(err)
		}
		return img, digest, nil
	case "oci":
		dir := filepath.Join(bs.tmp, "oci-layout")
		if err := untarLayout(ctx, p, dir); err != nil {
			return nil, "", err
		}
		idx, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			return nil, "", errdefs.New(errdefs.ErrInvalidArgument, "%q is not a valid OCI archive", p).WithCause(err)
		}
		img, err := pickImage(idx, p)
		return img, digest, err
	}
	return nil, "", errdefs.New(errdefs.ErrInvalidArgument,
		"%q is a tar but not an image archive (no manifest.json or index.json); use a rootfs source for a plain file system", p)
}

// archiveKind tells a docker save archive (manifest.json) from an OCI
// archive (index.json) by their top-level entries.
func archiveKind(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	kind := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return kind, nil
		}
		if err != nil {
			return "", errors.New("not a tar archive")
		}
		switch strings.TrimPrefix(h.Name, "./") {
		case "manifest.json":
			return "docker", nil // newer docker writes both; tarball reads manifest.json
		case "index.json":
			kind = "oci"
		}
	}
}

var layoutEntryRE = regexp.MustCompile(`^(oci-layout|index\.json|blobs/?|blobs/sha256/?|blobs/sha256/[0-9a-f]{64})$`)

// untarLayout unpacks the layout files of an OCI archive into dir, taking
// nothing but oci-layout, index.json and sha256 blobs.
func untarLayout(ctx context.Context, p, dir string) error {
	f, err := os.Open(p)
	if err != nil {
		return errdefs.New(errdefs.ErrInvalidArgument, "%q cannot be read", p).WithCause(err)
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return fmt.Errorf("template: unpack OCI archive: %v: %w", err, errdefs.ErrInternal)
	}
	tr := tar.NewReader(ctxReader{ctx, f})
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "%q is not a valid tar archive", p).WithCause(err)
		}
		n := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg || !layoutEntryRE.MatchString(n) || strings.HasSuffix(n, "/") {
			continue
		}
		out, err := os.OpenFile(filepath.Join(dir, filepath.FromSlash(n)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "%q holds %s twice", p, n).WithCause(err)
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("template: unpack OCI archive: %w", errdefs.ErrCancelled)
			}
			return errdefs.New(errdefs.ErrInvalidArgument, "%q cannot be read", p).WithCause(err)
		}
	}
}

// pickImage finds the linux/amd64 image in an index (nested indexes
// included). An index with one image and no platform data yields it; the
// config's architecture is checked afterwards.
func pickImage(idx v1.ImageIndex, what string) (v1.Image, error) {
	var found []string
	img, err := pickFrom(idx, &found, 0)
	if err != nil {
		return nil, ociErr(what, "its index cannot be read", err)
	}
	if img != nil {
		return img, nil
	}
	if len(found) == 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "%q holds no image", what)
	}
	return nil, errdefs.New(errdefs.ErrInvalidArgument, "%q has no %s/%s image (it has %s)",
		what, platformOS, platformArch, strings.Join(found, ", "))
}

func pickFrom(idx v1.ImageIndex, found *[]string, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, errors.New("indexes nested too deep")
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var unplatformed []v1.Hash
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if img, err := pickFrom(child, found, depth+1); img != nil || err != nil {
				return img, err
			}
		case d.MediaType.IsImage():
			if d.Platform == nil {
				unplatformed = append(unplatformed, d.Digest)
				*found = append(*found, "an image without platform")
				continue
			}
			if d.Platform.OS == platformOS && d.Platform.Architecture == platformArch {
				return idx.Image(d.Digest)
			}
			*found = append(*found, d.Platform.OS+"/"+d.Platform.Architecture)
		}
	}
	if len(unplatformed) == 1 {
		return idx.Image(unplatformed[0])
	}
	return nil, nil
}

// parseImageRef parses a tenant's image reference.
func parseImageRef(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "image reference %q is invalid", ref).WithCause(err)
	}
	return r, nil
}

// pullImage resolves a registry reference to its linux/amd64 image. Layers
// are fetched (and verified) while they are applied. Every connection goes
// through the registry policy (registry.go).
func (b *Builder) pullImage(ctx context.Context, ref string) (v1.Image, error) {
	r, err := parseImageRef(ref)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(b.registry.transport),
		remote.WithPlatform(v1.Platform{OS: platformOS, Architecture: platformArch}))
	if err != nil {
		return nil, pullErr(ref, err)
	}
	// Only a registry serves an image manifest: whatever else answered
	// (a web server saying 200 to everything) gets the generic failure too.
	m, err := img.Manifest()
	if err != nil {
		return nil, pullErr(ref, err)
	}
	if m.SchemaVersion != 2 || m.Config.Digest.Hex == "" {
		return nil, unreachable(fmt.Sprintf("%q", ref), fmt.Errorf("the answer to the manifest request is no image manifest (schema %d, config %q)", m.SchemaVersion, m.Config.Digest))
	}
	return img, nil
}

// ociErr classifies a go-containerregistry failure for the tenant.
func ociErr(what, problem string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("template: %s: %w", what, errdefs.ErrCancelled)
	}
	var terr *transport.Error
	if errors.As(err, &terr) && !errors.Is(err, errRefused) {
		switch terr.StatusCode {
		case http.StatusNotFound:
			return errdefs.New(errdefs.ErrInvalidArgument, "image %q was not found in its registry", what).WithCause(err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return errdefs.New(errdefs.ErrPermissionDenied, "the registry refused access to %q", what).WithCause(err)
		}
		return unreachable(fmt.Sprintf("%q", what), err)
	}
	if isNetErr(err) {
		return unreachable(fmt.Sprintf("%q", what), err)
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "%q is not a usable image: %s", what, problem).WithCause(err)
}

// fileDigest is "sha256:<hex>" of a file's bytes.
func fileDigest(ctx context.Context, p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "%q cannot be read", p).WithCause(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("template: hash source: %w", errdefs.ErrCancelled)
		}
		return "", errdefs.New(errdefs.ErrInvalidArgument, "%q cannot be read", p).WithCause(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
