package firecracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// ProbeKVM checks that /dev/kvm runs a guest: it makes a VM with one vCPU
// and one page of real-mode code (out 0x80; hlt) and expects the two exits
// within a bound. A /dev/kvm that exists but cannot run guests (some
// nested or paravirtual setups hang them) fails here, once, at start-up,
// rather than every sandbox create later.
func ProbeKVM(ctx context.Context) error {
	const timeout = 5 * time.Second
	kvm, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("firecracker: needs /dev/kvm (a KVM host, the kvm_intel or kvm_amd module): %w: %v", errdefs.ErrFailedPrecondition, err)
	}
	res := make(chan error, 1)
	tid := make(chan int, 1)
	var abort atomic.Bool
	go func() {
		// The thread stays locked (and is discarded) so that the signal
		// below reaches only the probe.
		runtime.LockOSThread()
		tid <- unix.Gettid()
		res <- probe(kvm, &abort)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	err = nil
	select {
	case err = <-res:
		if err == nil {
			return nil
		}
	case <-t.C:
		err = fmt.Errorf("the probe guest did not halt within %v", timeout)
		interrupt(&abort, <-tid, res)
	case <-ctx.Done():
		err = ctx.Err()
		interrupt(&abort, <-tid, res)
	}
	return fmt.Errorf("firecracker: /dev/kvm does not run guests: %w: %v", errdefs.ErrFailedPrecondition, err)
}

// interrupt kicks a KVM_RUN that hangs out with a signal (SIGURG, which
// the Go runtime takes as a preemption hint) and waits a little for it.
func interrupt(abort *atomic.Bool, tid int, res <-chan error) {
	abort.Store(true)
	for i := 0; i < 10; i++ {
		_ = unix.Tgkill(os.Getpid(), tid, unix.SIGURG)
		select {
		case <-res:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// KVM ioctls and structures (linux/kvm.h, x86-64).
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84

	kvmExitIO  = 2
	kvmExitHLT = 5
)

type kvmMemoryRegion struct {
	Slot, Flags                              uint32
	GuestPhysAddr, MemorySize, UserspaceAddr uint64
}

func ioctl(fd int, req, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// probe runs the probe guest on kvm (closing it); a KVM_RUN interrupted
// by a signal gives up once abort is set.
func probe(kvm int, abort *atomic.Bool) error {
	defer unix.Close(kvm)
	if v, err := ioctl(kvm, kvmGetAPIVersion, 0); err != nil || v != 12 {
		return fmt.Errorf("KVM API version %d (%v), want 12", v, err)
	}
	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return fmt.Errorf("create VM: %v", err)
	}
	defer unix.Close(int(vmfd))
	mem, err := unix.Mmap(-1, 0, 0x1000, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	const guestAddr = 0x1000
	copy(mem, []byte{0xB0, 0x2A, 0xE6, 0x80, 0xF4}) // mov al, 42; out 0x80, al; hlt
	region := kvmMemoryRegion{GuestPhysAddr: guestAddr, MemorySize: 0x1000, UserspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(int(vmfd), kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return fmt.Errorf("set memory: %v", err)
	}
	vcpu, err := ioctl(int(vmfd), kvmCreateVCPU, 0)
	if err != nil {
		return fmt.Errorf("create vCPU: %v", err)
	}
	defer unix.Close(int(vcpu))
	size, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil {
		return err
	}
	run, err := unix.Mmap(int(vcpu), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(run)
	var sregs [312]byte // struct kvm_sregs; cs (struct kvm_segment) first
	if _, err := ioctl(int(vcpu), kvmGetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return err
	}
	*(*uint64)(unsafe.Pointer(&sregs[0])) = 0  // cs.base
	*(*uint16)(unsafe.Pointer(&sregs[12])) = 0 // cs.selector
	if _, err := ioctl(int(vcpu), kvmSetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return err
	}
	var regs [18]uint64 // struct kvm_regs: ..., rip, rflags
	regs[16], regs[17] = guestAddr, 2
	if _, err := ioctl(int(vcpu), kvmSetRegs, uintptr(unsafe.Pointer(&regs[0]))); err != nil {
		return err
	}
	sawIO := false
	for i := 0; i < 16; i++ {
		if _, err := ioctl(int(vcpu), kvmRun, 0); err != nil {
			if errors.Is(err, unix.EINTR) && !abort.Load() {
				continue
			}
			return fmt.Errorf("KVM_RUN: %v", err)
		}
		reason := *(*uint32)(unsafe.Pointer(&run[8]))
		switch reason {
		case kvmExitIO:
			port := *(*uint16)(unsafe.Pointer(&run[34]))
			off := *(*uint64)(unsafe.Pointer(&run[40]))
			if port != 0x80 || off >= uint64(len(run)) || run[off] != 42 {
				return fmt.Errorf("probe guest wrote to the wrong port")
			}
			sawIO = true
		case kvmExitHLT:
			if !sawIO {
				return fmt.Errorf("probe guest halted without running its code")
			}
			return nil
		default:
			return fmt.Errorf("probe guest exit reason %d", reason)
		}
	}
	return fmt.Errorf("probe guest did not halt")
}
