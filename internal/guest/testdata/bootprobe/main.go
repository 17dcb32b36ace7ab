// Command bootprobe stands in for space-agent as /init in the boot test: it
// does the first steps the agent does (mount, load the manifest's modules in
// order, find the agent port, mount the root disk) and reports on the console.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	err := probe()
	if err != nil {
		fmt.Println("SPACE-PROBE FAIL", err)
	}
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART) // -no-reboot turns this into exit
}

func probe() error {
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
	} {
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	manifest, err := os.ReadFile("/etc/space/modules")
	if err != nil {
		return err
	}
	n := 0
	for _, p := range strings.Fields(string(manifest)) {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load %s: %w", p, err)
		}
		n++
	}
	port, err := waitPort("space.agent")
	if err != nil {
		return err
	}
	if err := unix.Mount("/dev/vda", "/mnt", "ext4", unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("mount /dev/vda: %w", err)
	}
	for _, p := range []string{"/mnt/bin/busybox", "/mnt/bin/sh", "/mnt/usr/local/bin/space-agent"} {
		if _, err := os.Lstat(p); err != nil {
			return err
		}
	}
	fmt.Printf("SPACE-PROBE OK modules=%d port=%s root=ok\n", n, port)
	return nil
}

// waitPort finds the virtio-serial port by name; ports appear shortly after
// virtio_console binds the device, so it looks for up to 30 s.
func waitPort(name string) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, f := range names {
			if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == name {
				return filepath.Base(filepath.Dir(f)), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no virtio port named %s", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
