// Package agentproto is the one definition of the protocol between the host
// (worker) and space-agent inside the guest. Both sides import it; nothing else
// defines wire types for the agent link.
//
// The link is one byte stream (a virtio-serial port under QEMU, a vsock
// connection under Firecracker). On every (re)connection the host runs the
// sync handshake (see link.go), then both sides speak yamux over the stream:
// the host opens one yamux stream per request, the agent serves it.
//
// On a stream, every message is a frame: a 4-byte big-endian length followed by
// that many bytes of JSON. The host writes one Request frame; the agent answers
// with one Response frame. Some operations continue on the same stream after
// that (documented on each Op): with Event frames, or with raw bytes until the
// writer half-closes the stream.
//
// Processes and their buffered output live in the agent, never in a
// connection: the link can drop and come back (every snapshot restore does
// that) and a client resumes a command's events from any sequence number.
package agentproto

import (
	"encoding/json"
	"time"
)

// Version is bumped on any change to the protocol. Version 2 added raw event
// data (EventsRequest.Raw, see event.go); a version 2 host still reads the
// events of a version 1 agent, so sandboxes suspended under an older agent
// resume. Version 3 added the port operations (OpPortList, OpPortDial),
// which an older agent refuses as unknown.
const Version = 3

// PortName is the virtio-serial port name the agent looks for under
// /sys/class/virtio-ports/*/name.
const PortName = "space.agent"

// VsockPort is the guest vsock port the agent listens on under Firecracker.
const VsockPort = 1024

// Op names a request.
type Op string

const (
	// OpPing answers Info. Used as the readiness check.
	OpPing Op = "ping"
	// OpConfigure hands the agent its identity (Configure). Sent after boot and
	// after every snapshot restore.
	OpConfigure Op = "configure"

	// OpStart starts a process (ProcessSpec) and answers ProcessInfo.
	OpStart Op = "process.start"
	// OpEvents (EventsRequest) answers an empty Response, then streams Event
	// frames: first those already buffered after EventsRequest.After, then live
	// ones, and closes the stream after the exit event. A client stops early by
	// closing the stream. Event frames are written by EventWriter and read by
	// ReadEvent.
	OpEvents Op = "process.events"
	// OpStdin (StdinRequest) writes to a process's stdin.
	OpStdin Op = "process.stdin"
	// OpSignal (SignalRequest) signals a process's whole group.
	OpSignal Op = "process.signal"
	// OpResize (ResizeRequest) resizes a process's PTY.
	OpResize Op = "process.resize"
	// OpGet (ProcessRef) answers ProcessInfo.
	OpGet Op = "process.get"
	// OpList answers ProcessList.
	OpList Op = "process.list"

	// OpReadFile (PathRequest) answers FileInfo, then the agent writes the
	// file's bytes raw and closes the stream.
	OpReadFile Op = "file.read"
	// OpWriteFile (WriteFileRequest): after the request the host writes the
	// bytes raw and half-closes; the agent then answers FileInfo (or an error).
	OpWriteFile Op = "file.write"
	// OpListDir (PathRequest) answers DirList.
	OpListDir Op = "file.list"
	// OpStat (PathRequest) answers FileInfo.
	OpStat Op = "file.stat"
	// OpDelete (DeleteRequest) answers an empty Response.
	OpDelete Op = "file.delete"
	// OpTarOut (PathRequest) answers an empty Response, then writes a tar
	// stream of the directory raw and closes.
	OpTarOut Op = "file.tar_out"
	// OpTarIn (PathRequest): after the request the host writes a tar stream raw
	// and half-closes; the agent unpacks it under Path and answers.
	OpTarIn Op = "file.tar_in"

	// OpFreeze / OpThaw quiesce the guest filesystems around a snapshot.
	OpFreeze Op = "fs.freeze"
	OpThaw   Op = "fs.thaw"

	// OpPortList (no arguments) answers PortList: the TCP ports listening
	// in the guest.
	OpPortList Op = "port.list"
	// OpPortDial (PortDialRequest) dials the port on the guest's loopback
	// (127.0.0.1, then [::1]) and answers an empty Response (or an error:
	// failed_precondition when nothing listens there); then the stream
	// carries the connection's bytes raw both ways. Either side's
	// half-close is the end of its direction (a TCP FIN in the guest);
	// the agent closes the stream once both directions have ended.
	OpPortDial Op = "port.dial"
)

// Request is the first frame on every stream.
type Request struct {
	Op   Op              `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers a Request. Error is set when the request failed.
type Response struct {
	Error  *Error          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Error is an agent-side failure. Code is an errdefs code (e.g. "not_found",
// "invalid_argument", "conflict"); Message is safe to show a tenant (no host
// paths; guest paths the tenant named are fine).
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Info describes the agent. Answer of OpPing.
type Info struct {
	Version      int       `json:"version"`
	AgentVersion string    `json:"agent_version"`
	Kernel       string    `json:"kernel"`
	BootedAt     time.Time `json:"booted_at"`
	// Configured is false until the first OpConfigure.
	Configured bool   `json:"configured"`
	SandboxID  string `json:"sandbox_id,omitempty"`
}

// Configure is the identity the host hands the agent after boot or restore.
type Configure struct {
	SandboxID string            `json:"sandbox_id"`
	Hostname  string            `json:"hostname"`
	Env       map[string]string `json:"env,omitempty"` // default env for new processes
	// Entropy seeds the guest RNG (credited) so clones of one snapshot diverge.
	Entropy []byte `json:"entropy"`
	// Now sets the guest wall clock.
	Now time.Time `json:"now"`
	// Network, when set, is the configuration of the guest's NIC; agents
	// that predate it ignore the field.
	Network *GuestNetwork `json:"network,omitempty"`
	// TrustedCA, when set, is a PEM CA certificate (never a key) the agent
	// adds to the guest's trust store: the platform's egress CA, for HTTPS
	// credential injection. Agents that predate it ignore the field.
	TrustedCA []byte `json:"trusted_ca,omitempty"`
}

// GuestNetwork is what the agent sets up on the guest's NIC: lo and the NIC
// up, one address, a default route and the DNS server in /etc/resolv.conf.
// Applying it again (after a restore) is harmless.
type GuestNetwork struct {
	MAC     string   `json:"mac"`     // the NIC to configure, found by its address
	Address string   `json:"address"` // CIDR, e.g. "172.31.0.2/30"
	Gateway string   `json:"gateway"` // default route, e.g. "172.31.0.1"
	DNS     []string `json:"dns,omitempty"`
}

// PTY asks for a pseudo-terminal of the given size.
type PTY struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ProcessSpec is what OpStart runs. Exactly one of Argv and Shell is set
// (Shell runs as /bin/sh -c).
type ProcessSpec struct {
	ID             string            `json:"id"` // chosen by the host, e.g. "cmd_…"; unique in the guest
	Argv           []string          `json:"argv,omitempty"`
	Shell          string            `json:"shell,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	User           string            `json:"user,omitempty"`  // name or numeric uid[:gid]
	Stdin          bool              `json:"stdin,omitempty"` // keep stdin open for OpStdin; otherwise /dev/null
	PTY            *PTY              `json:"pty,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	// BufferBytes bounds the buffered output (0 = agent default, 4 MiB).
	BufferBytes int `json:"buffer_bytes,omitempty"`
}

// ProcessRef names a process.
type ProcessRef struct {
	ID string `json:"id"`
}

// Process states.
const (
	StateRunning = "running"
	StateExited  = "exited"
)

// Exit reasons.
const (
	ReasonExited   = "exited"
	ReasonSignaled = "signaled"
	ReasonTimeout  = "timeout"
	ReasonKilled   = "killed"
	ReasonOOM      = "oom"
	// ReasonLost and ReasonSandboxDeleted are set by the host, never the agent.
	ReasonLost           = "lost"
	ReasonSandboxDeleted = "sandbox_deleted"
)

// ProcessInfo describes a process.
type ProcessInfo struct {
	ID        string      `json:"id"`
	PID       int         `json:"pid"`
	State     string      `json:"state"`
	StartedAt time.Time   `json:"started_at"`
	Exit      *ExitStatus `json:"exit,omitempty"`
	// LastSeq is the sequence number of the newest event.
	LastSeq uint64 `json:"last_seq"`
}

// ProcessList answers OpList.
type ProcessList struct {
	Processes []ProcessInfo `json:"processes"`
}

// ExitStatus is how a process ended. ExitCode is nil when it was signaled.
type ExitStatus struct {
	ExitCode *int      `json:"exit_code"`
	Signal   string    `json:"signal,omitempty"` // e.g. "SIGKILL"
	Reason   string    `json:"reason"`
	EndedAt  time.Time `json:"ended_at"`
}

// Event types.
const (
	EventStarted = "started"
	EventStdout  = "stdout"
	EventStderr  = "stderr"
	EventGap     = "gap"
	EventExit    = "exit"
)

// Event is one entry of a process's output log. Seq grows by one per event,
// starting at 1 with "started". A "gap" event is made at replay time when the
// events after the requested sequence were evicted from the bounded buffer:
// its Seq is the last evicted sequence number and LostBytes counts the output
// bytes lost, so a client that resumes with after=Seq continues seamlessly.
// With a PTY all output is "stdout".
type Event struct {
	Seq       uint64      `json:"seq"`
	Type      string      `json:"type"`
	Time      time.Time   `json:"time"`
	PID       int         `json:"pid,omitempty"`
	Data      []byte      `json:"data,omitempty"`
	LostBytes int64       `json:"lost_bytes,omitempty"`
	Exit      *ExitStatus `json:"exit,omitempty"`
}

// EventsRequest asks for the events with Seq > After. Raw asks for event
// data as raw bytes after each frame (see EventWriter); agents before
// version 2 ignore it.
type EventsRequest struct {
	ID    string `json:"id"`
	After uint64 `json:"after"`
	Raw   bool   `json:"raw,omitempty"`
}

// StdinRequest writes Data to stdin, then closes it when EOF is set.
type StdinRequest struct {
	ID   string `json:"id"`
	Data []byte `json:"data,omitempty"`
	EOF  bool   `json:"eof,omitempty"`
}

// SignalRequest sends Signal (e.g. "SIGTERM", "SIGKILL", "TERM", "9") to the
// process group. A SIGKILL sent this way makes the exit reason "killed".
type SignalRequest struct {
	ID     string `json:"id"`
	Signal string `json:"signal"`
}

// ResizeRequest resizes the PTY.
type ResizeRequest struct {
	ID   string `json:"id"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// PathRequest names an absolute guest path.
type PathRequest struct {
	Path string `json:"path"`
}

// WriteFileRequest writes a file; parents are created (0755). Mode 0 means 0644.
type WriteFileRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"`
	// Size, when above 0, is the exact number of bytes that follow: an
	// upload that ends short (the host's sender gave up, and its stream's
	// end looks like any other) or runs long is discarded, not kept
	// truncated. 0 means unknown: then the end of the stream is the end.
	Size int64 `json:"size,omitempty"`
}

// DeleteRequest removes a path; a non-empty directory needs Recursive.
type DeleteRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// File types in FileInfo.Type.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
	FileTypeOther   = "other"
)

// FileInfo describes one directory entry or file.
type FileInfo struct {
	Name  string    `json:"name"`
	Type  string    `json:"type"`
	Size  int64     `json:"size"`
	Mode  uint32    `json:"mode"` // permission bits
	MTime time.Time `json:"mtime"`
}

// DirList answers OpListDir.
type DirList struct {
	Entries []FileInfo `json:"entries"`
}

// ListeningPort is one TCP socket listening in the guest.
type ListeningPort struct {
	Port uint16 `json:"port"`
	// Address is the listening address as the guest reports it, e.g.
	// "0.0.0.0", "::", "127.0.0.1".
	Address string `json:"address"`
}

// PortList answers OpPortList, sorted by port (then address).
type PortList struct {
	Ports []ListeningPort `json:"ports"`
}

// PortDialRequest names the guest TCP port OpPortDial connects to.
type PortDialRequest struct {
	Port uint16 `json:"port"`
}
