package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/space-sandbox/space/internal/guest"
)

// options are what one run of the builder makes and from what.
type options struct {
	out       string   // directory the archives are written to
	registry  string   // registry part of the references, e.g. localhost
	tag       string   // tag of every image
	cacheDir  string   // Debian roots and the apt .deb cache
	kernelDir string   // guest kernel cache (scripts/setup.sh fills it)
	suite     string   // Debian suite of the roots
	mirror    string   // Debian mirror ("" = mmdebstrap's default)
	only      []string // image names to build (empty = all)
	goBin     string   // the go command
	log       *slog.Logger
}

// result is one built image.
type result struct {
	Name    string `json:"name"`
	Ref     string `json:"ref"`
	Digest  string `json:"digest"`
	Archive string `json:"archive"`
}

// build makes every image the options ask for and writes one archive each.
func build(o options) ([]result, error) {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(o.out, ".work-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	bins, err := buildBinaries(o, filepath.Join(work, "bin"))
	if err != nil {
		return nil, err
	}
	var kernel guest.Kernel
	roots := rootCache{dir: o.cacheDir, log: o.log}
	var results []result
	for _, s := range specs(o.suite, o.mirror) {
		if len(o.only) > 0 && !slices.Contains(o.only, s.name) {
			continue
		}
		rootBlob, rootInfo, err := roots.layer(s.root)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		layers := []namedLayer{{fileLayer{rootBlob, rootInfo},
			fmt.Sprintf("mmdebstrap --variant=%s %s (%s)", s.root.Variant, s.root.Suite, strings.Join(s.root.Packages, ","))}}
		if s.kernel {
			if kernel.Version == "" {
				if kernel, err = guest.Locate(o.kernelDir); err != nil {
					return nil, err
				}
			}
			kdir := filepath.Dir(kernel.Vmlinuz) // <cache>/<version>
			spec := layerSpec{trees: []tree{{src: kdir, dest: kernelDir + "/" + kernel.Version}}}
			l, err := newLayer(spec, filepath.Join(work, s.name+"-kernel.tar.gz"), "guest kernel "+kernel.Version)
			if err != nil {
				return nil, err
			}
			layers = append(layers, l)
		}
		var files []entry
		var names []string
		for _, b := range s.binaries {
			files = append(files, entry{name: b.dest, src: bins[b.pkg], override: true, mode: 0o755})
			names = append(names, b.dest)
		}
		l, err := newLayer(layerSpec{files: files}, filepath.Join(work, s.name+"-bin.tar.gz"), strings.Join(names, " "))
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)

		cfg := s.config
		cfg.Labels = map[string]string{
			"org.opencontainers.image.title":   s.repo,
			"org.opencontainers.image.version": o.tag,
		}
		img, err := assemble(layers, cfg)
		if err != nil {
			return nil, err
		}
		r, err := write(o, s, img)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

func newLayer(spec layerSpec, dst, createdBy string) (namedLayer, error) {
	li, err := writeLayer(spec, dst)
	if err != nil {
		return namedLayer{}, err
	}
	return namedLayer{fileLayer{dst, li}, createdBy}, nil
}

func write(o options, s imageSpec, img v1.Image) (result, error) {
	ref := s.repo + ":" + o.tag
	if o.registry != "" {
		ref = o.registry + "/" + ref
	}
	digest, err := img.Digest()
	if err != nil {
		return result{}, err
	}
	archive := filepath.Join(o.out, s.repo+".tar")
	if err := writeArchive(archive, ref, img); err != nil {
		return result{}, fmt.Errorf("%s: %w", s.name, err)
	}
	return result{Name: s.name, Ref: ref, Digest: digest.String(), Archive: archive}, nil
}

// buildBinaries builds each command once, static and with reproducible
// flags (the guest agent's flags in the Makefile): no cgo, no build paths,
// no symbol tables. Same source, same bytes.
func buildBinaries(o options, dir string) (map[string]string, error) {
	out := map[string]string{}
	for _, b := range []binary{spaced, spaceCLI, spaceAgent} {
		dst := filepath.Join(dir, filepath.Base(b.dest))
		cmd := exec.Command(o.goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", dst, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %v\n%s", b.pkg, err, msg)
		}
		out[b.pkg] = dst
	}
	return out, nil
}
