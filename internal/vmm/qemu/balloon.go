package qemu

// balloonArgs add a virtio balloon that is never inflated, only for free
// page reporting: the guest kernel (CONFIG_PAGE_REPORTING, the
// virtio_balloon module the agent loads) hands QEMU the 2 MiB blocks it
// has free, and QEMU discards them from guest RAM. With the memory file
// backend (share=on) the discard is a hole punched in the file
// (fallocate PUNCH_HOLE), so the host gets back the RAM an idle guest
// freed (what boot and the template's build touched and let go), and a
// suspend snapshot, a reflink of that file, holds less. The guest reads
// zeroes from a reported page only after it allocated it again, which it
// does not expect to hold anything.
//
// The device is part of the snapshot's device set
// (vmm.BootSpec.FreePageReporting): a VM restored from a snapshot has it
// exactly when the snapshot's VM had it, at the same place in the device
// order; the worker records which in each snapshot's manifest.
var balloonArgs = []string{"-device", "virtio-balloon-device,free-page-reporting=on"}
