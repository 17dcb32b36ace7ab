// Command mkartifacts builds the guest boot artifacts and the base template
// into a data dir and prints where they are, as JSON. It is the interim entry
// behind `make artifacts` until spaced builds them itself at start-up; it
// holds no logic of its own beyond calling internal/guest and
// internal/template.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/template"
)

func main() {
	agent := flag.String("agent", "bin/space-agent", "static space-agent binary")
	dataDir := flag.String("data-dir", "/var/lib/space", "SPACE data dir (boot/ and templates/ are made in it)")
	kernelDir := flag.String("kernel-dir", guest.KernelDirFromEnv(), "kernel cache ($"+guest.KernelDirEnv+")")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, log, *agent, *dataDir, *kernelDir); err != nil {
		fmt.Fprintln(os.Stderr, "mkartifacts:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, agent, dataDir, kernelDir string) error {
	k, err := guest.Locate(kernelDir)
	if err != nil {
		return err
	}
	ir, err := guest.BuildInitramfs(ctx, k, guest.InitramfsOptions{
		AgentBinary: agent, CacheDir: filepath.Join(dataDir, "boot"), Logger: log,
	})
	if err != nil {
		return err
	}
	base, err := template.BuildBase(ctx, template.BaseOptions{
		TemplatesDir: filepath.Join(dataDir, "templates"), AgentBinary: agent, Logger: log,
	})
	if err != nil {
		return err
	}
	out := map[string]any{
		"kernel":    map[string]string{"version": k.Version, "vmlinuz": k.Vmlinuz, "modules_dir": k.ModulesDir},
		"initramfs": map[string]any{"path": ir.Path, "digest": ir.Digest, "cached": ir.Cached},
		"base":      map[string]any{"image": base.Image, "digest": base.Digest, "size_bytes": base.SizeBytes},
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
