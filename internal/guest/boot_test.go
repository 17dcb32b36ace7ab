package guest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/template"
)

// hostKHz is the host TSC rate for tsc_early_khz: without it the guest's TSC
// calibration can hang under TCG when the host is loaded.
func hostKHz(t *testing.T) int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		t.Skipf("needs /proc/cpuinfo: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(mhz * 1000)
			}
		}
	}
	t.Skip("needs cpu MHz in /proc/cpuinfo")
	return 0
}

// TestBootInitramfs boots the cached kernel with an initramfs whose /init is a
// probe doing the agent's first steps: load the manifest's modules in order,
// find the space.agent port, mount the base template as /dev/vda. It proves
// the module order and the archive format against the real kernel.
func TestBootInitramfs(t *testing.T) {
	k := needKernel(t)
	qemu := needTool(t, "qemu-system-x86_64")
	if os.Geteuid() != 0 {
		t.Skip("needs root (to build the base template image)")
	}
	khz := hostKHz(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()

	probe := filepath.Join(dir, "bootprobe")
	build := exec.CommandContext(ctx, "go", "build", "-o", probe, "./testdata/bootprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	ir, err := BuildInitramfs(ctx, k, InitramfsOptions{AgentBinary: probe, CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	base, err := template.BuildBase(ctx, template.BaseOptions{TemplatesDir: filepath.Join(dir, "templates"), AgentBinary: probe})
	if err != nil {
		t.Fatal(err)
	}

	console := filepath.Join(dir, "console.log")
	cmd := exec.CommandContext(ctx, qemu,
		"-M", "microvm,acpi=on,pit=on,pic=on,rtc=on", "-nodefaults", "-no-user-config",
		"-accel", "tcg,thread=multi", "-cpu", "max", "-m", "256", "-smp", "1",
		"-display", "none", "-no-reboot",
		"-kernel", k.Vmlinuz, "-initrd", ir.Path,
		"-append", fmt.Sprintf("console=ttyS0 quiet tsc_early_khz=%d panic=-1", khz),
		"-serial", "file:"+console,
		"-drive", "id=root,file="+base.Image+",format=raw,if=none,readonly=on",
		"-device", "virtio-blk-device,drive=root",
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=agent,path="+filepath.Join(dir, "agent.sock")+",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=space.agent",
	)
	out, err := cmd.CombinedOutput() // the probe reboots, -no-reboot makes QEMU exit
	log, _ := os.ReadFile(console)
	if err != nil {
		t.Fatalf("qemu: %v\n%s\nconsole:\n%s", err, out, log)
	}
	want := fmt.Sprintf("SPACE-PROBE OK modules=%d port=vport", len(ir.Modules))
	if !strings.Contains(string(log), want) {
		t.Fatalf("console lacks %q:\n%s", want, log)
	}
	t.Logf("console: %s", strings.TrimSpace(string(log)))
}
