package firecracker

// The stand-in's copy of Firecracker's state rules and device behaviour
// (see standin_test.go for how it is run and what it checks).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
)

// preBoot are the resources Firecracker takes before InstanceStart only.
var preBoot = map[string]bool{"/machine-config": true, "/boot-source": true, "/vsock": true, "/entropy": true}

func isPreBoot(path string) bool {
	return preBoot[path] || strings.HasPrefix(path, "/drives/") || strings.HasPrefix(path, "/network-interfaces/")
}

// handle keeps Firecracker's rules; s.mu is held. Paths named in bodies
// are resolved through the jail; c.Resolved records them.
func (s *standin) handle(method, path string, body []byte, c *call) answer {
	resolve := func(p string) (string, bool, error) {
		h, w, err := s.resolve(p)
		if err == nil {
			if w {
				c.Resolved[p] = h + " (rw)"
			} else {
				c.Resolved[p] = h
			}
		}
		return h, w, err
	}
	started := s.state != infoNotStarted
	switch {
	case method == "GET" && path == "/":
		return answer{200, instanceInfo{AppName: "Firecracker", ID: s.id, State: s.state, VMMVersion: "1.16.1"}}
	case method == "GET" && path == "/version":
		return answer{200, map[string]string{"firecracker_version": "1.16.1"}}
	case method == "PUT" && path == "/logger":
		var l logger
		_ = json.Unmarshal(body, &l)
		h, w, err := resolve(l.LogPath)
		if err != nil || !w {
			return fault("Logger error: cannot open %s: %v", l.LogPath, err)
		}
		if _, err := os.Stat(h); err != nil {
			return fault("Logger error: %v", err)
		}
		if s.cfg.Flood > 0 {
			go s.flood(h)
		}
		return noContent
	case method == "PUT" && isPreBoot(path):
		if started || s.loaded {
			return fault("The requested operation is not supported after starting the microVM.")
		}
		if a, ok := s.checkResource(path, body, resolve); !ok {
			return a
		}
		s.config[path] = body
		return noContent
	case method == "PUT" && path == "/actions":
		var a instanceAction
		_ = json.Unmarshal(body, &a)
		if a.ActionType != actionInstanceStart {
			return fault("stand-in: action %s not supported", a.ActionType)
		}
		if started || s.loaded {
			return fault("The requested operation is not supported after starting the microVM.")
		}
		return s.instanceStart(resolve)
	case method == "PATCH" && path == "/vm":
		if !started {
			return fault("The requested operation is not supported before starting the microVM.")
		}
		var v vmState
		_ = json.Unmarshal(body, &v)
		if v.State == statePaused {
			s.state = infoPaused
		} else {
			s.state = infoRunning
		}
		return noContent
	case method == "PUT" && path == "/snapshot/create":
		if !started {
			return fault("The requested operation is not supported before starting the microVM.")
		}
		if s.state != infoPaused {
			return fault("Cannot create snapshot: the microVM is not paused.")
		}
		return s.createSnapshot(body, resolve)
	case method == "PUT" && path == "/snapshot/load":
		if started || s.loaded || len(s.config) > 0 {
			return fault("Loading a microVM snapshot not allowed after configuring boot-specific resources.")
		}
		return s.loadSnapshot(body, resolve)
	}
	return fault("stand-in: %s %s is in the spec but not emulated", method, path)
}

type resolver func(string) (string, bool, error)

// checkResource checks what Firecracker checks when a pre-boot resource is
// put: that its files open as asked, that its ids match the path.
func (s *standin) checkResource(path string, body []byte, resolve resolver) (answer, bool) {
	switch {
	case path == "/machine-config":
		var m machineConfig
		_ = json.Unmarshal(body, &m)
		if m.VCPUCount > 1 && m.SMT && m.VCPUCount%2 == 1 {
			return fault("The vCPU number is invalid!"), false
		}
		s.memMiB = m.MemSizeMiB
	case path == "/boot-source":
		var b bootSource
		_ = json.Unmarshal(body, &b)
		if _, _, err := resolve(b.KernelImagePath); err != nil {
			return fault("The kernel file cannot be opened: %v", err), false
		}
		if b.InitrdPath != "" {
			if _, _, err := resolve(b.InitrdPath); err != nil {
				return fault("The initrd file cannot be opened: %v", err), false
			}
		}
	case strings.HasPrefix(path, "/drives/"):
		var d drive
		_ = json.Unmarshal(body, &d)
		if d.DriveID != strings.TrimPrefix(path, "/drives/") {
			return fault("The id from the path does not match the id from the body!"), false
		}
		h, w, err := resolve(d.PathOnHost)
		if err != nil {
			return fault("Unable to open the drive: %v", err), false
		}
		if !d.IsReadOnly && !w {
			return fault("Unable to open the drive %s read-write: Read-only file system", d.PathOnHost), false
		}
		if _, err := os.Stat(h); err != nil {
			return fault("Unable to open the drive: %v", err), false
		}
	case strings.HasPrefix(path, "/network-interfaces/"):
		var n networkInterface
		_ = json.Unmarshal(body, &n)
		if n.IfaceID != strings.TrimPrefix(path, "/network-interfaces/") {
			return fault("The id from the path does not match the id from the body!"), false
		}
		if err := tapExists(n.HostDevName); err != nil {
			return fault("Open tap device failed: %v", err), false
		}
	case path == "/vsock":
		var v vsock
		_ = json.Unmarshal(body, &v)
		if _, w, err := resolve(v.UDSPath); err != nil || !w {
			return fault("Cannot create backend for vsock device: %s is not writable (%v)", v.UDSPath, err), false
		}
	}
	return answer{}, true
}

// tapExists checks that a tap of that name is in the stand-in's network
// namespace (the one the VMM runs in).
func tapExists(name string) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	_, err := net.InterfaceByName(name)
	return err
}

func (s *standin) instanceStart(resolve resolver) answer {
	raw, ok := s.config["/boot-source"]
	if !ok {
		return fault("Cannot start microvm without kernel configuration.")
	}
	var b bootSource
	_ = json.Unmarshal(raw, &b)
	h, _, _ := resolve(b.KernelImagePath)
	head := make([]byte, 4)
	if f, err := os.Open(h); err == nil {
		_, _ = io.ReadFull(f, head)
		f.Close()
	}
	if string(head) != "\x7fELF" {
		return fault("Cannot load kernel due to invalid memory configuration or invalid kernel image: Kernel Loader: failed to load ELF kernel image")
	}
	if a, ok := s.bindVsock(s.vsockPath(), resolve); !ok {
		return a
	}
	s.state = infoRunning
	fmt.Println("[    0.000000] Linux version stand-in (Firecracker API stand-in)")
	if b.InitrdPath == "" && !strings.Contains(b.BootArgs, "root=") {
		// A kernel with nothing to mount panics, and panic=-1 reboot=k
		// makes Firecracker exit.
		fmt.Println("[    0.100000] Kernel panic - not syncing: " + probeMarker + " on unknown-block(0,0)")
		if strings.Contains(b.BootArgs, "panic=-1") && strings.Contains(b.BootArgs, "reboot=k") {
			go func() { time.Sleep(100 * time.Millisecond); os.Exit(0) }()
		}
	}
	return noContent
}

func (s *standin) vsockPath() string {
	var v vsock
	if raw, ok := s.config["/vsock"]; ok {
		_ = json.Unmarshal(raw, &v)
	}
	return v.UDSPath
}

// bindVsock listens on the hybrid vsock socket and plays the guest agent
// behind it: CONNECT to the agent's port is answered OK and then a
// greeting line; other ports are refused by closing, as Firecracker does.
func (s *standin) bindVsock(jailPath string, resolve resolver) (answer, bool) {
	if jailPath == "" {
		return answer{}, true
	}
	h, w, err := resolve(jailPath)
	if err != nil || !w {
		return fault("Cannot create backend for vsock device: %v", err), false
	}
	l, err := net.Listen("unix", h)
	if err != nil {
		return fault("Cannot create backend for vsock device: %v", err), false
	}
	s.vsockL = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
				if err != nil {
					return
				}
				port, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "CONNECT ")))
				if !strings.HasPrefix(line, "CONNECT ") || err != nil || port != agentproto.VsockPort {
					return
				}
				fmt.Fprintf(c, "OK 1073741824\n%s\n", standinGreet)
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return answer{}, true
}

func (s *standin) createSnapshot(body []byte, resolve resolver) answer {
	var p snapshotCreate
	_ = json.Unmarshal(body, &p)
	if p.SnapshotType != "" && p.SnapshotType != snapshotFull {
		return fault("stand-in: only full snapshots")
	}
	sh, sw, err := resolve(p.SnapshotPath)
	if err != nil || !sw {
		return fault("Cannot create snapshot: cannot open the snapshot file: %v", err)
	}
	mh, mw, err := resolve(p.MemFilePath)
	if err != nil || !mw {
		return fault("Cannot create snapshot: cannot open the memory file: %v", err)
	}
	snap := standinSnapshot{MemMiB: s.memMiB, Ifaces: map[string]string{}, Drives: map[string]string{}, Vsock: s.vsockPath()}
	if s.snapshot != nil {
		snap = *s.snapshot
	}
	for k, raw := range s.config {
		switch {
		case strings.HasPrefix(k, "/network-interfaces/"):
			var n networkInterface
			_ = json.Unmarshal(raw, &n)
			snap.Ifaces[n.IfaceID] = n.HostDevName
		case strings.HasPrefix(k, "/drives/"):
			var d drive
			_ = json.Unmarshal(raw, &d)
			snap.Drives[d.DriveID] = d.PathOnHost
		}
	}
	if s.cfg.Plant != "" {
		for _, p := range []string{sh, mh} {
			if err := plant(s.cfg.Plant, p, s.cfg.PlantTarget); err != nil {
				return fault("stand-in: plant: %v", err)
			}
		}
		return noContent
	}
	b, _ := json.Marshal(snap)
	if err := os.WriteFile(sh, b, 0o600); err != nil {
		return fault("Cannot create snapshot: %v", err)
	}
	f, err := os.OpenFile(mh, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fault("Cannot create snapshot: %v", err)
	}
	defer f.Close()
	if err := f.Truncate(int64(snap.MemMiB) << 20); err != nil {
		return fault("Cannot create snapshot: %v", err)
	}
	return noContent
}

func (s *standin) loadSnapshot(body []byte, resolve resolver) answer {
	var p snapshotLoad
	_ = json.Unmarshal(body, &p)
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(body, &raw)
	_, hasMem := raw["mem_backend"]
	_, hasOld := raw["mem_file_path"]
	if hasMem == hasOld {
		return fault("Exactly one of mem_file_path and mem_backend must be given.")
	}
	sh, _, err := resolve(p.SnapshotPath)
	if err != nil {
		return fault("Load snapshot error: cannot open the snapshot file: %v", err)
	}
	b, err := os.ReadFile(sh)
	if err != nil {
		return fault("Load snapshot error: %v", err)
	}
	var snap standinSnapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return fault("Load snapshot error: the microVM state is corrupt: %v", err)
	}
	if p.MemBackend.BackendType != backendFile {
		return fault("stand-in: only the File memory backend")
	}
	mh, _, err := resolve(p.MemBackend.BackendPath)
	if err != nil {
		return fault("Load snapshot error: cannot open the memory file: %v", err)
	}
	st, err := os.Stat(mh)
	if err != nil || st.Size() != int64(snap.MemMiB)<<20 {
		return fault("Load snapshot error: the memory file does not match the snapshot's memory size (%v)", err)
	}
	for _, o := range p.NetworkOverrides {
		if _, ok := snap.Ifaces[o.IfaceID]; !ok {
			return fault("Load snapshot error: network override for unknown interface %s", o.IfaceID)
		}
		if err := tapExists(o.HostDevName); err != nil {
			return fault("Load snapshot error: open tap device failed: %v", err)
		}
		snap.Ifaces[o.IfaceID] = o.HostDevName
	}
	for id, dev := range snap.Ifaces {
		if err := tapExists(dev); err != nil {
			return fault("Load snapshot error: interface %s: open tap device failed: %v", id, err)
		}
	}
	for id, path := range snap.Drives {
		if _, _, err := resolve(path); err != nil {
			return fault("Load snapshot error: drive %s: %v", id, err)
		}
	}
	if p.VsockOverride != nil {
		snap.Vsock = p.VsockOverride.UDSPath
	}
	if a, ok := s.bindVsock(snap.Vsock, resolve); !ok {
		return a
	}
	s.snapshot, s.memMiB, s.loaded = &snap, snap.MemMiB, true
	s.state = infoPaused
	if p.ResumeVM {
		s.state = infoRunning
	}
	return noContent
}

// flood writes cfg.Flood bytes and a last line to stdout, stderr and the
// logger at path (opened as Firecracker opens it).
func (s *standin) flood(path string) {
	lg, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in: flood:", err)
		return
	}
	line := []byte(strings.Repeat("x", 1023) + "\n")
	var wg sync.WaitGroup
	for _, w := range []*os.File{os.Stdout, os.Stderr, lg} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(0); n < s.cfg.Flood; n += int64(len(line)) {
				_, _ = w.Write(line)
			}
			_, _ = w.Write([]byte("LAST LINE\n"))
		}()
	}
	wg.Wait()
	lg.Close()
}

// plant leaves kind at p: what a hostile VMM puts where the host expects
// a file it wrote.
func plant(kind, p, target string) error {
	_ = os.Remove(p)
	switch kind {
	case "symlink":
		return os.Symlink(target, p)
	case "hardlink":
		return os.Link(target, p)
	case "fifo":
		return unix.Mkfifo(p, 0o600)
	case "dir":
		return os.Mkdir(p, 0o700)
	}
	return fmt.Errorf("unknown plant %q", kind)
}
