package qemu

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
)

// fileRestoreKernel is the kernel a VMM started to be restored is given:
// the real kernel's boot-protocol header and setup code only.
//
// QEMU copies -kernel and -initrd into its own heap for the firmware to
// load (fw_cfg) and keeps the copies for the VMM's life: 13.5 MiB of
// anonymous memory per VMM for the 14 MiB Debian cloud kernel plus the
// initramfs, under KVM as under TCG. A restored VM never loads them: its
// kernel runs from guest RAM (the memory file), and neither the kernel
// nor the initrd is part of the migration stream, whose device set and
// RAM blocks (the firmware's option ROM, ACPI tables) do not depend on
// them. QEMU only needs a header it accepts, so a restore gets that
// header and no initrd. A restored VM never boots again: it has
// -no-reboot, and its guest's panic=-1 ends the VMM.
const fileRestoreKernel = "restore-kernel"

// bzImage boot-protocol header fields (Documentation/arch/x86/boot.rst).
const (
	hdrSetupSects = 0x1f1
	hdrMagicOff   = 0x202
	hdrMagic      = 0x53726448 // "HdrS"
	hdrEnd        = 0x268
)

// writeRestoreKernel writes the header and setup sectors of spec's kernel
// into its state dir and returns the spec to start the restoring VMM
// with: that file as the kernel, no initrd.
func writeRestoreKernel(spec vmm.BootSpec) (vmm.BootSpec, error) {
	f, err := os.Open(spec.Kernel)
	if err != nil {
		return spec, fmt.Errorf("qemu: kernel: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	defer f.Close()
	hdr := make([]byte, hdrEnd)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return spec, fmt.Errorf("qemu: kernel %s: header: %w: %v", spec.Kernel, errdefs.ErrInvalidArgument, err)
	}
	if binary.LittleEndian.Uint32(hdr[hdrMagicOff:]) != hdrMagic {
		return spec, fmt.Errorf("qemu: kernel %s is not a bzImage: %w", spec.Kernel, errdefs.ErrInvalidArgument)
	}
	sects := int(hdr[hdrSetupSects])
	if sects == 0 {
		sects = 4
	}
	setup := make([]byte, (sects+1)*512)
	if _, err := f.ReadAt(setup, 0); err != nil {
		return spec, fmt.Errorf("qemu: kernel %s: setup: %w: %v", spec.Kernel, errdefs.ErrInvalidArgument, err)
	}
	path := filepath.Join(spec.StateDir, fileRestoreKernel)
	if err := os.WriteFile(path, setup, 0o644); err != nil {
		return spec, fmt.Errorf("qemu: restore kernel: %w: %v", errdefs.ErrInternal, err)
	}
	spec.Kernel, spec.Initrd = path, ""
	return spec, nil
}
