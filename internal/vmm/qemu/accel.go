package qemu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/guest"
)

// Accelerators.
const (
	AccelAuto = "auto"
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// probeMarker is what the probe guest's /init writes to the serial console.
const probeMarker = "SPACE-KVM-PROBE-OK"

// probeTimeout bounds the KVM probe: a working KVM reaches init well within
// it; a nested PVM that cannot run ordinary kernels hangs or aborts.
const probeTimeout = 10 * time.Second

// resolveAccel turns Options.Accel into "kvm" or "tcg" for this kernel,
// probing (and caching the answer) for "auto".
func (d *Driver) resolveAccel(ctx context.Context, kernel string) (string, error) {
	switch d.opts.Accel {
	case AccelKVM, AccelTCG:
		return d.opts.Accel, nil
	case "", AccelAuto:
	default:
		return "", fmt.Errorf("qemu: unknown accel %q (want auto, kvm or tcg)", d.opts.Accel)
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return AccelTCG, nil
	}
	key := d.probeKey(kernel)

	d.accelMu.Lock()
	defer d.accelMu.Unlock()
	if a, ok := d.accelCache[key]; ok {
		return a, nil
	}
	cache := d.loadAccelCache()
	if a, ok := cache[key]; ok {
		d.accelCache[key] = a
		return a, nil
	}
	accel := AccelTCG
	if err := probeKVM(ctx, d.binary, kernel, AccelKVM, "", probeTimeout); err == nil {
		accel = AccelKVM
	} else {
		d.log.Info("kvm probe failed; using tcg", "err", err)
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	d.accelCache[key] = accel
	cache[key] = accel
	d.saveAccelCache(cache)
	return accel, nil
}

func (d *Driver) probeKey(kernel string) string {
	key := d.version() + "|" + kernel
	if st, err := os.Stat(kernel); err == nil {
		key += fmt.Sprintf("|%d|%d", st.Size(), st.ModTime().UnixNano())
	}
	return key
}

func (d *Driver) version() string {
	out, err := exec.Command(d.binary, "-version").Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func (d *Driver) cachePath() string {
	if d.opts.CacheDir == "" {
		return ""
	}
	return filepath.Join(d.opts.CacheDir, "qemu-accel.json")
}

func (d *Driver) loadAccelCache() map[string]string {
	m := map[string]string{}
	if p := d.cachePath(); p != "" {
		if b, err := os.ReadFile(p); err == nil {
			_ = json.Unmarshal(b, &m)
		}
	}
	return m
}

func (d *Driver) saveAccelCache(m map[string]string) {
	p := d.cachePath()
	if p == "" {
		return
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		d.log.Warn("accel cache", "err", err)
		return
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err == nil {
		_ = os.Rename(tmp, p)
	}
}

// probeKVM boots kernel with a one-file initramfs whose /init prints
// probeMarker and powers off. It succeeds only when the marker appears within
// probeTimeout; it catches both an abort (QEMU exits without the marker) and
// a hang (timeout).
func probeKVM(ctx context.Context, binary, kernel, accel, extraCmdline string, timeout time.Duration) error {
	dir, err := os.MkdirTemp("", "space-qemu-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	initrd := filepath.Join(dir, "probe.cpio")
	if err := writeProbeInitrd(initrd); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{
		"-M", machineOpts, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-m", "128", "-smp", "1", "-kernel", kernel, "-initrd", initrd,
		"-serial", "stdio", "-append", "console=ttyS0 panic=-1 quiet " + extraCmdline,
	}
	args = append(args, accelArgs(accel)...)
	cmd := exec.Command(binary, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), probeMarker) {
				found <- true
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		found <- false
	}()
	var ok bool
	select {
	case ok = <-found:
	case <-ctx.Done():
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	if !ok {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 300 {
			msg = msg[len(msg)-300:]
		}
		return fmt.Errorf("%s probe did not reach init (%v): %s", accel, ctx.Err(), msg)
	}
	return nil
}

func accelArgs(accel string) []string {
	if accel == AccelKVM {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	return []string{"-accel", fmt.Sprintf("tcg,thread=multi,tb-size=%d", tcgTBSizeMiB), "-cpu", "max"}
}

// writeProbeInitrd writes a newc archive holding only /init, a static x86-64
// ELF of a few dozen bytes: write(1, marker); reboot(POWER_OFF); for(;;).
// The kernel's built-in initramfs provides /dev/console for fd 1.
func writeProbeInitrd(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := guest.NewCPIOWriter(f)
	elf := probeELF()
	w.File("init", 0o755, bytes.NewReader(elf), int64(len(elf)))
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

func probeELF() []byte {
	msg := []byte("\n" + probeMarker + "\n")
	const base, hdr = 0x400000, 64 + 56
	code := []byte{
		0xB8, 1, 0, 0, 0, // mov eax, 1 (write)
		0xBF, 1, 0, 0, 0, // mov edi, 1
		0x48, 0x8D, 0x35, 31, 0, 0, 0, // lea rsi, [rip+31] -> msg
		0xBA, byte(len(msg)), 0, 0, 0, // mov edx, len
		0x0F, 0x05, // syscall
		0xB8, 169, 0, 0, 0, // mov eax, 169 (reboot)
		0xBF, 0xAD, 0xDE, 0xE1, 0xFE, // mov edi, LINUX_REBOOT_MAGIC1
		0xBE, 0x69, 0x19, 0x12, 0x28, // mov esi, LINUX_REBOOT_MAGIC2
		0xBA, 0xDC, 0xFE, 0x21, 0x43, // mov edx, LINUX_REBOOT_CMD_POWER_OFF
		0x0F, 0x05, // syscall
		0xEB, 0xFE, // jmp $
	}
	size := hdr + len(code) + len(msg)
	b := new(bytes.Buffer)
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	_ = binary.Write(b, le, uint16(2))        // ET_EXEC
	_ = binary.Write(b, le, uint16(0x3e))     // x86-64
	_ = binary.Write(b, le, uint32(1))        // version
	_ = binary.Write(b, le, uint64(base+hdr)) // entry
	_ = binary.Write(b, le, uint64(64))       // phoff
	_ = binary.Write(b, le, uint64(0))        // shoff
	_ = binary.Write(b, le, uint32(0))        // flags
	_ = binary.Write(b, le, []uint16{64, 56, 1, 64, 0, 0})
	_ = binary.Write(b, le, []uint32{1, 5}) // PT_LOAD, R+X
	_ = binary.Write(b, le, []uint64{0, base, base, uint64(size), uint64(size), 0x1000})
	b.Write(code)
	b.Write(msg)
	return b.Bytes()
}

// hostTSCkHz is the host TSC frequency, which TCG's guest TSC follows.
func hostTSCkHz(log *slog.Logger) int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/tsc_freq_khz"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
			return v
		}
	}
	f, err := os.Open("/proc/cpuinfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "cpu MHz" {
				if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && mhz > 0 {
					return int(mhz * 1000)
				}
			}
		}
	}
	log.Warn("host TSC frequency unknown; guest calibrates itself")
	return 0
}
