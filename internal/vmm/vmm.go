// Package vmm is the contract between the worker and a virtual machine monitor.
// Drivers (vmm/qemu, vmm/firecracker) implement it and register themselves;
// vmm/vmmtest is the conformance suite every driver runs.
//
// The required interfaces are small: start a VM from a BootSpec, dial its agent
// link, stop it, wait for it. Abilities that not every driver has (pause,
// snapshots) are separate interfaces found with a type assertion.
//
// This package owns no processes and no files; drivers own those for the VMs
// they start, under BootSpec.StateDir.
package vmm

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Disk is a block device given to the guest, in order: the first is /dev/vda.
type Disk struct {
	Path     string
	ReadOnly bool
}

// BootSpec is everything a driver needs to start a VM.
type BootSpec struct {
	// ID names the VM; unique on the host. Drivers use it to find VMs again
	// after a restart of the worker.
	ID string
	// StateDir is a private directory for the driver's files about this VM
	// (control sockets, pid file, console log, recorded spec). It exists.
	StateDir string

	Kernel  string // kernel image path
	Initrd  string // initramfs path
	Cmdline string // extra kernel command-line arguments; no identity or secrets here
	Disks   []Disk

	VCPUs     int
	MemoryMiB int

	// MemoryFile, when set, backs guest RAM with this file (shared mapping), so
	// snapshots need not copy memory. Drivers without the ability ignore it.
	MemoryFile string

	// Network, when set, gives the VM one NIC (virtio-net) on a tap device.
	// It is part of the device set: a restore needs it when the snapshot's
	// VM had it.
	Network *Network `json:",omitempty"`

	// FreePageReporting, when set, gives the VM a virtio balloon that is
	// never inflated, through which the guest reports the memory it frees
	// so the host takes it back (drivers without it ignore the field). It
	// is part of the device set: a restore needs it exactly when the
	// snapshot's VM had it.
	FreePageReporting bool `json:",omitempty"`
}

// Network is the VM's NIC.
type Network struct {
	// Tap opens the host end: a file attached to the tap device
	// (IFF_TAP|IFF_NO_PI). The driver calls it once per VMM it starts and
	// closes the file once the VMM holds its own copy.
	Tap func() (*os.File, error) `json:"-"`
	// MAC is the guest NIC's address ("02:53:50:00:00:02").
	MAC string
}

// Absolute returns s with its paths (state dir, kernel, initrd, memory
// file, disks) made absolute: a VMM runs in its state dir, or in a jail.
func (s BootSpec) Absolute() (BootSpec, error) {
	var err error
	abs := func(p *string) {
		if *p != "" && err == nil {
			*p, err = filepath.Abs(*p)
		}
	}
	abs(&s.StateDir)
	abs(&s.Kernel)
	abs(&s.Initrd)
	abs(&s.MemoryFile)
	disks := make([]Disk, len(s.Disks))
	copy(disks, s.Disks)
	for i := range disks {
		abs(&disks[i].Path)
	}
	s.Disks = disks
	return s, err
}

// Validate checks the fields every driver needs.
func (s BootSpec) Validate() error {
	switch {
	case s.ID == "":
		return fmt.Errorf("boot spec: empty ID")
	case s.StateDir == "":
		return fmt.Errorf("boot spec %s: empty StateDir", s.ID)
	case s.Kernel == "":
		return fmt.Errorf("boot spec %s: no kernel", s.ID)
	case s.VCPUs < 1:
		return fmt.Errorf("boot spec %s: vcpus must be >= 1", s.ID)
	case s.MemoryMiB < 64:
		return fmt.Errorf("boot spec %s: memory must be >= 64 MiB", s.ID)
	}
	return nil
}

// Driver starts VMs.
type Driver interface {
	// Name is the driver's registered name ("qemu", "firecracker").
	Name() string
	// Start boots a VM. It returns once the VMM process runs; the guest agent
	// may not be up yet (the caller waits for it over the agent link). On
	// error nothing is left running.
	Start(ctx context.Context, spec BootSpec) (VM, error)
	// Recover finds the VM recorded in stateDir by an earlier Start (possibly
	// by a worker process that has since died) and adopts it if its VMM still
	// runs. It returns an error wrapping errdefs.ErrNotFound when the VMM is
	// gone; its leftovers in stateDir are then cleaned.
	Recover(ctx context.Context, stateDir string) (VM, error)
}

// VM is a running (or exited) virtual machine.
type VM interface {
	ID() string
	// PID is the VMM process id, for logs and leak checks.
	PID() int
	// DialAgent opens a new connection to the guest agent's link. Only one
	// connection is live at a time; dialling again replaces the old one.
	DialAgent(ctx context.Context) (net.Conn, error)
	// Stop ends the VM and releases everything the driver made for it (the
	// VMM process and its group, sockets, files in StateDir). Safe to call
	// twice and after the VM died.
	Stop(ctx context.Context) error
	// Done is closed when the VMM process has exited, for whatever reason.
	Done() <-chan struct{}
	// Err says why the VMM exited, once Done is closed (nil after Stop).
	Err() error
	// ConsoleTail returns up to n of the last lines the guest wrote to its
	// console. For logs and internal error details; never shown to tenants.
	ConsoleTail(n int) []string
}

// Pauser is a VM whose vCPUs can be stopped and resumed in place.
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Snapshotter is a VM that can save its device state (and memory, when it is
// not already in BootSpec.MemoryFile) into dir. The VM must be paused.
type Snapshotter interface {
	Snapshot(ctx context.Context, dir string) error
}

// Detacher is a VM whose handle can be released without stopping it: the
// driver drops its connections and watchers and the VMM keeps running, to be
// adopted later with Driver.Recover (by this or another worker process).
type Detacher interface {
	Detach() error
}

// Restorer is a Driver that starts a VM from a snapshot made by Snapshotter.
// The VM comes back paused; the caller resumes it.
type Restorer interface {
	Restore(ctx context.Context, spec BootSpec, snapshotDir string) (VM, error)
}

// Factory makes a driver from its options.
type Factory func(opts Options) (Driver, error)

// Options configure a driver.
type Options struct {
	// Binary overrides the VMM binary path.
	Binary string
	// Accel is "auto", "kvm" or "tcg" (drivers that need KVM reject "tcg").
	Accel string
	// CacheDir keeps probe results across restarts.
	CacheDir string
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
}

var (
	registryMu sync.Mutex
	registry   = map[string]Factory{}
)

// Register makes a driver available by name; drivers call it from init.
func Register(name string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("vmm: driver registered twice: " + name)
	}
	registry[name] = f
}

// Open returns the driver registered as name.
func Open(name string, opts Options) (Driver, error) {
	registryMu.Lock()
	f, ok := registry[name]
	registryMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("vmm: no driver %q (have %v)", name, Drivers())
	}
	return f(opts)
}

// Drivers lists the registered driver names.
func Drivers() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
