// Package agent is space-agent, the guest side of the agent link. It runs as
// PID 1 of the guest (boot.go turns the initramfs into the sandbox's root
// filesystem) and serves the agentproto operations: processes with bounded,
// replayable output, files, identity and freeze/thaw. Processes and their
// output belong to the Agent, never to a link session, so the host can drop
// and re-establish the link (every snapshot restore does) without loss.
//
// Everything except Boot also works as an ordinary root process on the host,
// which is how the tests run it (Config.Privileged false: nothing that would
// change the host's hostname, clock or filesystems is done).
package agent

import (
	"encoding/binary"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// Config configures an Agent. The zero value (plus a Logger) is the
// unprivileged test mode serving the host's own filesystem.
type Config struct {
	Logger *slog.Logger
	// Version is reported in Info.AgentVersion.
	Version string
	// Privileged lets the agent change machine-wide state: hostname, wall
	// clock, credited entropy, filesystem freeze. Only the guest's PID 1.
	Privileged bool
	// FileRoot is the directory the file operations treat as "/"
	// (default "/").
	FileRoot string
	// EtcDir holds the passwd and group files for user lookup (default "/etc").
	EtcDir string
	// CgroupRoot is the cgroup v2 directory under which each process gets its
	// own cgroup ("" disables per-process cgroups and OOM detection).
	CgroupRoot string
	// FreezePath is the mount point OpFreeze/OpThaw act on ("" makes them
	// no-ops, as in test mode).
	FreezePath string
	// RaiseTimerSlack raises the timer slack of the agent's threads
	// (slack.go) and starts commands from a thread with the default one.
	// Only the guest's PID 1: it changes the whole process.
	RaiseTimerSlack bool
}

// Agent serves agentproto requests. Create it with New.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	procs  *processTable
	files  *files
	booted time.Time
	kernel string

	mu         sync.Mutex
	configured bool
	sandboxID  string
	env        map[string]string

	freezeMu sync.Mutex
	frozen   bool
}

// New returns an Agent. All Agents of a process share one child reaper.
func New(cfg Config) *Agent {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.FileRoot == "" {
		cfg.FileRoot = "/"
	}
	if cfg.EtcDir == "" {
		cfg.EtcDir = "/etc"
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, booted: time.Now().UTC(), files: &files{root: cfg.FileRoot}}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		a.kernel = unix.ByteSliceToString(uts.Release[:])
	}
	r := sharedReaper(a.log)
	a.procs = &processTable{
		log: a.log, reaper: r, cgroups: newCgroups(cfg.CgroupRoot, a.log), etc: cfg.EtcDir,
		env: a.defaultEnv, procs: map[string]*process{},
	}
	if cfg.RaiseTimerSlack {
		a.procs.spawner = slackedSpawner(a.log)
	}
	return a
}

// slackedSpawner raises the agent's timer slack and returns the spawner
// that keeps commands at the default; nil (slack as it was, or commands
// started anywhere) when either step fails.
func slackedSpawner(log *slog.Logger) *spawner {
	base, err := raiseTimerSlack(log)
	if err != nil {
		log.Warn("timer slack", "err", err)
		if base == 0 {
			return nil
		}
	}
	s, err := newSpawner(base)
	if err != nil {
		log.Warn("command spawner", "err", err)
		return nil
	}
	return s
}

func (a *Agent) defaultEnv() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.env
}

// Info answers OpPing.
func (a *Agent) Info() agentproto.Info {
	a.mu.Lock()
	defer a.mu.Unlock()
	return agentproto.Info{
		Version: agentproto.Version, AgentVersion: a.cfg.Version, Kernel: a.kernel,
		BootedAt: a.booted, Configured: a.configured, SandboxID: a.sandboxID,
	}
}

// Configure takes the identity the host hands over after boot or restore.
func (a *Agent) Configure(c agentproto.Configure) error {
	if a.cfg.Privileged {
		if c.Hostname != "" {
			if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
				return errdefs.New(errdefs.ErrInvalidArgument, "cannot set hostname %q", c.Hostname).WithCause(err)
			}
		}
		if c.Network != nil {
			if err := a.configureNetwork(*c.Network); err != nil {
				return err
			}
		}
		if len(c.TrustedCA) > 0 {
			if err := installTrustedCA("/", c.TrustedCA); err != nil {
				return err
			}
		}
		if !c.Now.IsZero() {
			tv := unix.NsecToTimeval(c.Now.UnixNano())
			if err := unix.Settimeofday(&tv); err != nil {
				a.log.Warn("set clock", "err", err)
			}
		}
	}
	if len(c.Entropy) > 0 {
		if err := a.addEntropy(c.Entropy); err != nil {
			a.log.Warn("seed entropy", "err", err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.configured, a.sandboxID = true, c.SandboxID
	a.env = make(map[string]string, len(c.Env))
	for k, v := range c.Env {
		a.env[k] = v
	}
	a.log.Debug("configured", "sandbox", c.SandboxID) // on every wake: serve.go
	return nil
}

// addEntropy mixes seed into the kernel pool; when privileged it is also
// credited, so a restored clone's RNG diverges from its siblings at once.
func (a *Agent) addEntropy(seed []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if !a.cfg.Privileged {
		_, err = f.Write(seed)
		return err
	}
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	buf := make([]byte, 8+(len(seed)+3)&^3)
	binary.NativeEndian.PutUint32(buf[0:], uint32(len(seed)*8))
	binary.NativeEndian.PutUint32(buf[4:], uint32(len(seed)))
	copy(buf[8:], seed)
	if err := ioctlPtr(int(f.Fd()), unix.RNDADDENTROPY, buf); err != nil {
		return err
	}
	// Credited entropy does not reseed a CRNG that is already initialised
	// until its next scheduled reseed; force it, so clones restored from one
	// snapshot diverge at once.
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); errno != 0 {
		return errno
	}
	return nil
}

// rndReseedCRNG is Linux's RNDRESEEDCRNG, _IO('R', 0x07).
const rndReseedCRNG = 0x5207

// Linux FIFREEZE/FITHAW: _IOWR('X', 119/120, int).
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

// Freeze quiesces FreezePath (writes block until Thaw).
func (a *Agent) Freeze() error { return a.freeze(true) }

// Thaw undoes Freeze.
func (a *Agent) Thaw() error { return a.freeze(false) }

func (a *Agent) freeze(on bool) error {
	a.freezeMu.Lock()
	defer a.freezeMu.Unlock()
	if a.cfg.FreezePath == "" || !a.cfg.Privileged || a.frozen == on {
		return nil
	}
	f, err := os.Open(a.cfg.FreezePath)
	if err != nil {
		return errdefs.New(errdefs.ErrInternal, "freeze: cannot open filesystem").WithCause(err)
	}
	defer f.Close()
	req := uintptr(fiThaw)
	if on {
		req = fiFreeze
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, 0) // the argument is unused
	if errno != 0 && errno != unix.EBUSY && errno != unix.EINVAL {
		return errdefs.New(errdefs.ErrInternal, "freeze/thaw failed: %v", errno)
	}
	a.frozen = on
	return nil
}
