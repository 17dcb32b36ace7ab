package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fileLayer is a gzip layer already on disk whose digests are known, so
// assembling an image never reads it again.
type fileLayer struct {
	path string
	info layerInfo
}

func (l fileLayer) Digest() (v1.Hash, error)            { return v1.NewHash(l.info.Digest) }
func (l fileLayer) DiffID() (v1.Hash, error)            { return v1.NewHash(l.info.DiffID) }
func (l fileLayer) Size() (int64, error)                { return l.info.Size, nil }
func (l fileLayer) MediaType() (types.MediaType, error) { return types.DockerLayer, nil }
func (l fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

// namedLayer is a layer with what the image history says made it.
type namedLayer struct {
	fileLayer
	createdBy string
}

// assemble stacks the layers on an empty image (Docker schema 2 media
// types, which every runtime and registry takes, and which a docker-archive
// loaded by crane gives back unchanged, digest included) and sets the
// runtime config. Every timestamp is the epoch.
func assemble(layers []namedLayer, cfg v1.Config) (v1.Image, error) {
	img := empty.Image
	for _, l := range layers {
		vl, err := partial.CompressedToLayer(l.fileLayer)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: vl, History: v1.History{
			Created: v1.Time{Time: epoch}, CreatedBy: l.createdBy, Comment: "space deploy/images",
		}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}

// writeArchive writes img as one tar that is both a docker-archive
// (manifest.json, for `docker load`, `kind load image-archive` and crane)
// and an OCI image layout (oci-layout, index.json, blobs/, for
// `ctr images import` and skopeo), as `docker save` does since Docker 25.
// Blobs are stored once; entries are sorted and carry no timestamps.
func writeArchive(dst, ref string, img v1.Image) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	type file struct {
		name  string
		bytes []byte
		layer v1.Layer
	}
	files := []file{
		{name: "oci-layout", bytes: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: blob(digest), bytes: manifest},
		{name: blob(cfgName), bytes: config},
	}
	var layerNames []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		layerNames = append(layerNames, blob(d))
		files = append(files, file{name: blob(d), layer: l})
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.DockerManifestSchema2, Digest: digest, Size: int64(len(manifest)),
			Annotations: map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
		}},
	})
	if err != nil {
		return err
	}
	dockerManifest, err := json.Marshal([]struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: blob(cfgName), RepoTags: []string{ref}, Layers: layerNames}})
	if err != nil {
		return err
	}
	files = append(files, file{name: "index.json", bytes: index}, file{name: "manifest.json", bytes: dockerManifest})
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })

	f, err := os.Create(dst + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(dst + ".tmp")
	defer f.Close()
	tw := tar.NewWriter(f)
	seen := map[string]bool{}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, fl := range files {
		if seen[fl.name] { // two layers with the same bytes
			continue
		}
		seen[fl.name] = true
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: fl.name, Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX}
		if fl.layer == nil {
			hdr.Size = int64(len(fl.bytes))
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := tw.Write(fl.bytes); err != nil {
				return err
			}
			continue
		}
		if hdr.Size, err = fl.layer.Size(); err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		rc, err := fl.layer.Compressed()
		if err != nil {
			return err
		}
		n, err := io.Copy(tw, rc)
		rc.Close()
		if err != nil || n != hdr.Size {
			return fmt.Errorf("archive: layer %s: wrote %d of %d bytes: %v", fl.name, n, hdr.Size, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}
