package agent

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RunInit is the whole life of the agent as the guest's PID 1: boot, serve
// the link (vsock or virtio-serial port), and power off on SIGTERM (or when
// something fatal happens; PID 1 must never simply exit).
func RunInit(log *slog.Logger, version string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGPWR)
	go func() {
		s := <-sigs
		log.Info("shutting down", "signal", s.String())
		cancel()
	}()

	if err := Boot(ctx, log, BootConfig{}); err != nil {
		log.Error("boot failed", "err", err)
		PowerOff(log)
		return
	}
	// An OOM kill in a guest full of processes (a fork bomb) would print
	// every task to the serial console, which under TCG takes seconds per
	// kill and stalls the guest, the agent included.
	if err := os.WriteFile("/proc/sys/vm/oom_dump_tasks", []byte("0"), 0); err != nil {
		log.Warn("oom_dump_tasks", "err", err)
	}
	quietIdle(log)
	a := New(Config{
		Logger: log, Version: version, Privileged: true,
		CgroupRoot: "/sys/fs/cgroup/space-agent", FreezePath: "/",
		RaiseTimerSlack: true,
	})
	a.waitLink(ctx, log) // vsock (Firecracker) or the virtio-serial port (QEMU): vsock.go
	PowerOff(log)
}

// PowerOff ends every process, syncs and remounts the root read-only, and
// powers the machine off.
func PowerOff(log *slog.Logger) {
	_ = unix.Kill(-1, unix.SIGTERM)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && unix.Kill(-1, 0) == nil {
		time.Sleep(50 * time.Millisecond)
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	unix.Sync()
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		log.Warn("remount root read-only", "err", err)
	}
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		log.Error("power off", "err", err)
	}
	select {} // PID 1 must not return while the kernel powers off
}
