package local

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// A VM's device set must be the same when it is restored as when its
// snapshot was taken, so every snapshot's manifest names the set its VM
// had, and a restore starts its VMM with that set, not with whatever this
// worker boots today. A sandbox carries the set of the VM it runs now into
// its next suspend or checkpoint (and across a worker restart, in
// devicesFile), so a sandbox suspended before an upgrade that changed the
// set keeps its old set for as long as it lives.
const (
	// deviceSetOriginal: disk, agent port, entropy, NIC. What a manifest
	// without device_set (written before it existed) means.
	deviceSetOriginal = 1
	// deviceSetBalloon adds a virtio balloon for free page reporting
	// (vmm.BootSpec.FreePageReporting).
	deviceSetBalloon = 2
	// currentDeviceSet is the newest set this worker knows.
	currentDeviceSet = deviceSetBalloon
)

// bootDeviceSet is what a cold boot (of a sandbox or a template's VM)
// gets: currentDeviceSet, but for tests that make the snapshots of an
// older worker.
var bootDeviceSet = currentDeviceSet

// devicesFile, in a sandbox's dir, records the device set of its VM.
const devicesFile = "device_set"

// deviceSetOf is the device set m's VM had; a set newer than this worker
// knows is failed_precondition (a snapshot made by a newer worker).
func deviceSetOf(m manifest) (int, error) {
	switch {
	case m.DeviceSet == 0:
		return deviceSetOriginal, nil
	case m.DeviceSet > currentDeviceSet:
		return 0, errdefs.New(errdefs.ErrFailedPrecondition,
			"the sandbox was saved by a newer worker (device set %d; this worker knows up to %d)", m.DeviceSet, currentDeviceSet)
	}
	return m.DeviceSet, nil
}

// freePageReporting says whether VMs of device set n have the balloon.
func freePageReporting(n int) bool { return n >= deviceSetBalloon }

// useDeviceSet makes n the set of sb's next VM, recorded for a worker
// restart.
func (sb *sandbox) useDeviceSet(n int) error {
	if err := os.WriteFile(sb.path(devicesFile), []byte(strconv.Itoa(n)+"\n"), 0o600); err != nil {
		return snapfile.DiskError("record device set", err)
	}
	sb.devices = n
	return nil
}

// recordedDeviceSet reads the set sb's VM runs with, as recorded by
// useDeviceSet; a sandbox whose VM was started before the record existed
// has the original set.
func (sb *sandbox) recordedDeviceSet() int {
	b, err := os.ReadFile(sb.path(devicesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return deviceSetOriginal
	}
	n, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil || n < deviceSetOriginal || n > currentDeviceSet {
		return deviceSetOriginal
	}
	return n
}
