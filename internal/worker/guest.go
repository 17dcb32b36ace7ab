package worker

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
)

// Guest is what the control plane calls in a sandbox's guest: its
// processes and their events, and its files. The local worker hands out the
// agent's client (agentclient.Client satisfies Guest); a remote worker's
// client forwards the same calls over the worker protocol.
//
// What survives what: a Guest stays valid across drops of the agent link
// and across pause, suspend, wake and restore (calls made while no VM runs
// fail with errdefs.ErrUnavailable and work again after a wake); it fails
// for good once the sandbox is deleted. Processes and their event logs live
// in the guest: they survive a restart of the worker process (a new worker
// reattaches), and are gone with the VM.
//
// Error classes: every call is bounded even without a deadline in ctx
// (errdefs.ErrDeadlineExceeded when the guest does not answer in time);
// errdefs.ErrUnavailable when the link cannot be made; errdefs.ErrNotFound
// for an unknown process id or path; errdefs.ErrInvalidArgument for a bad
// spec or path; errdefs.ErrFailedPrecondition for a call the process's
// state does not allow (resize without a PTY); errdefs.ErrResourceExhausted
// when the guest is out of space or memory.
type Guest interface {
	// Start starts a process with the spec's ID; starting an ID that
	// exists is errdefs.ErrConflict.
	Start(ctx context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error)
	// Events streams the process's events with Seq > after, to the exit
	// event (then io.EOF) or until ctx ends; a dropped link is resumed
	// from the last event delivered.
	Events(ctx context.Context, id string, after uint64) (agentproto.EventStream, error)
	Stdin(ctx context.Context, id string, data []byte, eof bool) error
	Signal(ctx context.Context, id, signal string) error
	Resize(ctx context.Context, id string, rows, cols uint16) error
	Get(ctx context.Context, id string) (agentproto.ProcessInfo, error)
	List(ctx context.Context) ([]agentproto.ProcessInfo, error)

	// ReadFile opens a guest file; the caller closes the reader.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, agentproto.FileInfo, error)
	// WriteFile writes r to path (parents created). size, when above 0,
	// is r's length: an upload that ends short is discarded, not kept.
	WriteFile(ctx context.Context, path string, mode uint32, size int64, r io.Reader) (agentproto.FileInfo, error)
	ListDir(ctx context.Context, path string) ([]agentproto.FileInfo, error)
	Stat(ctx context.Context, path string) (agentproto.FileInfo, error)
	Delete(ctx context.Context, path string, recursive bool) error
	// TarOut streams the directory path as a tar archive; TarIn unpacks
	// one under path.
	TarOut(ctx context.Context, path string) (io.ReadCloser, error)
	TarIn(ctx context.Context, path string, r io.Reader) error

	// ListPorts lists the TCP ports listening in the guest (IPv4 and IPv6, one
	// entry per port and address, sorted by port).
	ListPorts(ctx context.Context) ([]agentproto.ListeningPort, error)
	// DialPort opens a byte stream to 127.0.0.1:port inside the guest (then [::1])
	// over the agent link, never the guest's network. ctx bounds the dial only.
	// errdefs.ErrFailedPrecondition when nothing listens on the port;
	// errdefs.ErrUnavailable when the link cannot be made; errdefs.ErrResourceExhausted
	// when the sandbox's port-connection budget is spent; ErrInvalidArgument for port 0.
	// The conn's deadlines work; Close ends both directions; it also implements
	// CloseWrite() error (half-close: the guest server sees EOF, replies still flow).
	DialPort(ctx context.Context, port uint16) (net.Conn, error)
}

// NetworkRecord is one entry of a sandbox's egress audit log: a connection,
// request or DNS query the platform allowed or refused.
type NetworkRecord struct {
	Time    time.Time
	Sandbox string
	// Kind is "http", "https" (a request inside intercepted TLS), "tls",
	// "tcp" or "dns".
	Kind string
	// Destination is what the guest asked for (a name with port when it
	// gave one, else the address it dialled); Upstream the address the
	// platform connected to, if any.
	Destination string
	Upstream    string
	Allowed     bool
	// Rule is the policy entry or guard that decided.
	Rule              string
	BytesOut, BytesIn int64
	// Injected lists the header names the proxy set (never their values).
	Injected []string
}
