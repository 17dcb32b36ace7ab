// Command images builds SPACE's container images without a container
// daemon: a Debian root made with mmdebstrap (cached by its package list),
// the guest kernel for the worker, and our static binaries, stacked with
// go-containerregistry into one archive per image that `kind load
// image-archive`, `ctr images import`, `docker load` and `crane push` all
// take. The same inputs give the same digest: sorted entries, zero
// timestamps, SOURCE_DATE_EPOCH=0 for mmdebstrap.
//
//	go run ./deploy/images -o bin/images
//
// It builds files only: it pushes nothing and runs no image.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/space-sandbox/space/internal/guest"
)

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
	results, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	if err := report(o.out, results); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	o := options{log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	fs.StringVar(&o.out, "o", "bin/images", "directory the image archives are written to")
	fs.StringVar(&o.registry, "registry", "localhost", "registry part of the image references (retag or push elsewhere with crane)")
	fs.StringVar(&o.tag, "tag", "", "image tag (default: the chart's appVersion, deploy/helm/space/Chart.yaml)")
	fs.StringVar(&o.cacheDir, "cache", "/var/cache/space/images", "cache of Debian roots (by package list) and .deb files")
	fs.StringVar(&o.kernelDir, "kernel-dir", guest.KernelDirFromEnv(), "guest kernel cache (make setup fills it)")
	fs.StringVar(&o.suite, "suite", "bookworm", "Debian suite of the image roots")
	fs.StringVar(&o.mirror, "mirror", "", "Debian mirror (default: mmdebstrap's)")
	only := fs.String("only", "", "comma-separated images to build: control, worker (default: both)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, n := range strings.Split(*only, ",") {
		switch n = strings.TrimSpace(n); n {
		case "":
		case "control", "worker":
			o.only = append(o.only, n)
		default:
			return o, fmt.Errorf("-only: unknown image %q (control, worker)", n)
		}
	}
	if o.goBin = os.Getenv("GO"); o.goBin == "" {
		if p, err := exec.LookPath("go"); err == nil {
			o.goBin = p
		} else {
			o.goBin = "/usr/local/go/bin/go"
		}
	}
	if o.tag == "" {
		tag, err := chartAppVersion(o.goBin)
		if err != nil {
			return o, err
		}
		o.tag = tag
	}
	return o, nil
}

// chartAppVersion reads appVersion from the chart, so the images the chart
// names by default are the ones this builds.
func chartAppVersion(goBin string) (string, error) {
	out, err := exec.Command(goBin, "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root (go list -m): %v", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "deploy", "helm", "space", "Chart.yaml")
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`), nil
		}
	}
	return "", fmt.Errorf("%s has no appVersion", p)
}

// report prints each image's reference and digest and writes them to
// <out>/images.json for scripts.
func report(out string, results []result) error {
	for _, r := range results {
		fmt.Printf("%-8s %s@%s\n         %s\n", r.Name, r.Ref, r.Digest, r.Archive)
	}
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "images.json"), append(b, '\n'), 0o644)
}
