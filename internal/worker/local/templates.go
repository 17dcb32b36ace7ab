package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// retryFailedSnapshot is how long a template whose ready snapshot could not
// be made cold-boots before the worker tries again.
const retryFailedSnapshot = 10 * time.Minute

// templateKey names the ready snapshot of one template build at one VM
// size, booted with this worker's kernel and initramfs: any of these
// changing makes a different snapshot. The version names the drivers'
// device sets: v2, QEMU's gained a free-page-reporting balloon.
func (w *Worker) templateKey(tpl template.Metadata, vcpus, memMiB int, diskBytes int64) string {
	h := sha256.New()
	fmt.Fprintf(h, "v2\n%s\n%d\n%d\n%d\n%s\n", tpl.Digest, vcpus, memMiB, diskBytes, w.cfg.Driver.Name())
	if w.networking() { // the NIC is part of the snapshot's device set
		fmt.Fprintf(h, "nic %s\n", network.GuestMAC)
	}
	for _, p := range []string{w.cfg.Kernel, w.cfg.Initrd} {
		if fi, err := os.Stat(p); err == nil {
			fmt.Fprintf(h, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func (w *Worker) templateSnapshotsDir() string {
	return filepath.Join(w.cfg.Storage.Root(), "snapshots", "templates")
}

func (w *Worker) canSnapshot() bool {
	_, ok := w.cfg.Driver.(vmm.Restorer)
	return ok && !w.cfg.DisableSnapshots
}

// templateSnapshot returns the ready snapshot for spec's template and size,
// making it first if needed, with its build's lock held until unlock (the
// snapshot stays until then). ok is false when there is none (snapshots
// disabled or unsupported, or making one failed): the caller cold-boots,
// holding nothing.
func (w *Worker) templateSnapshot(ctx context.Context, spec worker.SandboxSpec) (dir string, m manifest, ok bool, unlock func()) {
	if !w.canSnapshot() {
		return "", m, false, nil
	}
	dir, m, unlock, err := w.prepareTemplate(ctx, spec)
	if err != nil {
		w.log.Warn("no ready snapshot for template: cold boot instead", "template", spec.Template, "err", causeOf(err))
		return "", m, false, nil
	}
	return dir, m, true, unlock
}

// PrepareTemplate implements worker.Lifecycle.
func (w *Worker) PrepareTemplate(ctx context.Context, spec worker.SandboxSpec) error {
	if !w.canSnapshot() {
		return errdefs.New(errdefs.ErrFailedPrecondition, "this worker does not keep ready snapshots")
	}
	dir, m, unlock, err := w.prepareTemplate(ctx, spec)
	if err != nil {
		return err
	}
	defer unlock() // a forget of the build after this drops the pool's target
	w.pool.want(dir, m)
	return nil
}

// prepareTemplate is templateSnapshot's work; on success the build's lock
// is held until unlock.
func (w *Worker) prepareTemplate(ctx context.Context, spec worker.SandboxSpec) (string, manifest, func(), error) {
	tpl, err := w.loadTemplate(ctx, spec.Template)
	if err != nil {
		return "", manifest{}, nil, err
	}
	unlock := w.tplLocks.Read(tpl.Name, tpl.Digest)
	dir, m, err := w.readySnapshot(ctx, tpl, spec)
	if err != nil {
		unlock()
		return "", m, nil, err
	}
	return dir, m, unlock, nil
}

// readySnapshot finds, verifies or makes the ready snapshot of build tpl
// at spec's size; the build's lock held.
func (w *Worker) readySnapshot(ctx context.Context, tpl template.Metadata, spec worker.SandboxSpec) (string, manifest, error) {
	diskBytes := max(tpl.SizeBytes, int64(spec.DiskMiB)<<20)
	key := w.templateKey(tpl, spec.VCPUs, spec.MemoryMiB, diskBytes)
	dir := filepath.Join(w.templateSnapshotsDir(), key)
	unlock := w.ready.Lock(key)
	defer unlock()
	m, verified, failedAt, failed := w.ready.Look(key, tpl.Ref())
	if verified {
		return dir, m, nil
	}
	if failed && time.Since(failedAt) < retryFailedSnapshot {
		return "", m, errdefs.New(errdefs.ErrUnavailable, "making the template's snapshot failed recently")
	}
	if _, err := os.Stat(filepath.Join(dir, manifestFile)); err == nil {
		m, err = snapfile.Verify(ctx, dir)
		if err == nil {
			w.ready.Ready(key, m)
			return dir, m, nil
		}
		w.log.Error("template snapshot damaged: making it again", "template", tpl.Ref(), "err", causeOf(err))
		if err := os.RemoveAll(dir); err != nil {
			return "", m, fmt.Errorf("remove damaged template snapshot: %w: %v", errdefs.ErrInternal, err)
		}
	}
	started := time.Now()
	m, err := w.makeTemplateSnapshot(ctx, tpl, spec, diskBytes, dir)
	if err != nil {
		if ctx.Err() == nil {
			w.ready.Failed(key)
		}
		return "", m, err
	}
	w.ready.Ready(key, m)
	w.log.Info("template ready snapshot made", "template", tpl.Ref(), "vcpus", spec.VCPUs,
		"memory_mib", spec.MemoryMiB, "took", time.Since(started).Round(time.Millisecond))
	return dir, m, nil
}

// makeTemplateSnapshot boots the template in a staging dir, waits for the
// agent (and the template's ready command), pauses it, saves its device
// state, stops it, and seals the staging dir as dir.
func (w *Worker) makeTemplateSnapshot(ctx context.Context, tpl template.Metadata, spec worker.SandboxSpec,
	diskBytes int64, dir string) (m manifest, err error) {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	staging := dir + ".tmp-" + hex.EncodeToString(suffix)
	// The VM's state dir is short (unix socket paths are limited) and
	// outside the snapshot.
	vmState := filepath.Join(filepath.Dir(w.templateSnapshotsDir()), "vm-"+hex.EncodeToString(suffix))
	for _, d := range []string{staging, vmState} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return m, snapfile.DiskError("template snapshot dir", err)
		}
		defer os.RemoveAll(d) // staging is gone after the rename on success
	}
	if err := w.cfg.Storage.EnsureFree(ctx, diskBytes/4+snapshotMargin); err != nil {
		return m, err
	}
	disk, mem := filepath.Join(staging, diskFile), filepath.Join(staging, memFile)
	if err := w.cfg.Storage.CloneAndGrow(ctx, tpl.Image, disk, diskBytes); err != nil {
		return m, fmt.Errorf("clone template disk: %w", err)
	}
	if err := createMemFile(mem, spec.MemoryMiB); err != nil {
		return m, err
	}
	nic, releaseNIC, err := w.templateNet(ctx, "tpl-"+hex.EncodeToString(suffix))
	if err != nil {
		return m, err
	}
	defer releaseNIC()
	vm, err := w.cfg.Driver.Start(ctx, vmm.BootSpec{
		ID: "tpl-" + filepath.Base(dir)[:12], StateDir: vmState,
		Kernel: w.cfg.Kernel, Initrd: w.cfg.Initrd, Disks: []vmm.Disk{{Path: disk}},
		VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB, MemoryFile: mem, Network: nic,
		FreePageReporting: freePageReporting(bootDeviceSet),
	})
	if err != nil {
		return m, fmt.Errorf("start template vm: %w", err)
	}
	defer vm.Stop(context.WithoutCancel(ctx))
	client := agentclient.New(vm.DialAgent, w.log.With("template", tpl.Ref()))
	defer client.Close()
	if err := w.waitAgent(ctx, vm, client); err != nil {
		return m, err
	}
	if len(tpl.Defaults.ReadyCommand) > 0 {
		if err := w.awaitReadyCommand(ctx, client, tpl.Defaults.ReadyCommand); err != nil {
			return m, err
		}
	}
	client.Close()
	p, ok1 := vm.(vmm.Pauser)
	s, ok2 := vm.(vmm.Snapshotter)
	if !ok1 || !ok2 {
		return m, errdefs.New(errdefs.ErrFailedPrecondition, "this worker's VMM cannot snapshot")
	}
	if err := p.Pause(ctx); err != nil {
		return m, fmt.Errorf("pause template vm: %w", err)
	}
	if err := s.Snapshot(ctx, staging); err != nil {
		return m, w.classifyDisk("save template device state", err)
	}
	// Stopped and paused, the memory file and disk no longer change: they
	// are the snapshot's own files.
	if err := vm.Stop(ctx); err != nil {
		return m, fmt.Errorf("stop template vm: %w", err)
	}
	m = manifest{CreatedAt: time.Now().UTC(), VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB, Template: tpl.Ref(), DeviceSet: bootDeviceSet}
	if err := snapfile.Seal(ctx, staging, m); err != nil {
		return m, err
	}
	if err := snapfile.ReadJSON(filepath.Join(staging, manifestFile), &m); err != nil {
		return m, fmt.Errorf("template snapshot: %w: %v", errdefs.ErrInternal, err)
	}
	if err := os.Rename(staging, dir); err != nil {
		return m, fmt.Errorf("template snapshot: %w: %v", errdefs.ErrInternal, err)
	}
	return m, snapfile.SyncDir(filepath.Dir(dir))
}

// awaitReadyCommand runs the template's ready command until it exits 0,
// bounded by BootTimeout.
func (w *Worker) awaitReadyCommand(ctx context.Context, c *agentclient.Client, argv []string) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.BootTimeout)
	defer cancel()
	for i := 0; ; i++ {
		id := fmt.Sprintf("ready-%d", i)
		if _, err := c.Start(ctx, agentproto.ProcessSpec{ID: id, Argv: argv}); err != nil {
			return fmt.Errorf("start ready command: %w", err)
		}
		for {
			info, err := c.Get(ctx, id)
			if err != nil {
				return fmt.Errorf("ready command: %w", err)
			}
			if info.Exit != nil {
				if info.Exit.ExitCode != nil && *info.Exit.ExitCode == 0 {
					return nil
				}
				break
			}
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return errors.Join(errdefs.New(errdefs.ErrDeadlineExceeded, "the template's ready command did not succeed in time"), err)
			}
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return errdefs.New(errdefs.ErrDeadlineExceeded, "the template's ready command did not succeed in time")
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
