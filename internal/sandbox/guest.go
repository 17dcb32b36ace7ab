package sandbox

import (
	"context"
	"io"
	"net"
	"strings"
	"unicode/utf8"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// The guest chooses the error class of its answers, and so the HTTP status
// its tenant's request gets; a guest that may be anything (root in the VM,
// its agent replaced) may only choose among the classes the Guest contract
// gives its calls. The rest (unauthenticated, payload_too_large, data_loss,
// internal, a code the host does not know) become internal with a message
// of the host's: the guest's own stays in the cause, for the logs.

// guestClasses are the error classes a guest's answer may carry: the
// outcomes of a call on the guest's processes and files (worker.Guest).
var guestClasses = map[*errdefs.Class]bool{
	errdefs.ErrInvalidArgument:    true,
	errdefs.ErrNotFound:           true,
	errdefs.ErrConflict:           true,
	errdefs.ErrFailedPrecondition: true,
	errdefs.ErrPermissionDenied:   true,
	errdefs.ErrResourceExhausted:  true, // out of space or memory in the guest
	errdefs.ErrAborted:            true, // an upload that ended short
}

// linkClasses are what the host's side of the link says of a guest that
// cannot be reached, does not answer in time, or keeps breaking a command's
// event stream (data_loss: SettleBroken ends the command); a guest saying
// so itself gets what a silent or broken one would.
var linkClasses = map[*errdefs.Class]bool{
	errdefs.ErrUnavailable:      true,
	errdefs.ErrDeadlineExceeded: true,
	errdefs.ErrCancelled:        true,
	errdefs.ErrDataLoss:         true,
}

// MaxGuestMessage bounds the bytes of a guest's error message that reach
// its tenant.
const MaxGuestMessage = 1024

// guestError is err (from a call into the guest) as the tenant may see it.
func guestError(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	c, msg, _ := errdefs.Render(err)
	switch {
	case linkClasses[c]:
		return err
	case !guestClasses[c]:
		return errdefs.New(errdefs.ErrInternal, "the sandbox's agent failed the request").WithCause(err)
	case len(msg) <= MaxGuestMessage && utf8.ValidString(msg):
		return err
	}
	msg = strings.ToValidUTF8(msg[:min(len(msg), MaxGuestMessage)], "")
	return errdefs.New(c, "%s…", msg).WithCause(err)
}

// guardedGuest is a Guest whose errors are guestError's.
type guardedGuest struct{ g worker.Guest }

// guard wraps g (nil stays nil; a guarded guest is not wrapped twice).
func guard(g worker.Guest) worker.Guest {
	switch g.(type) {
	case nil, guardedGuest:
		return g
	}
	return guardedGuest{g}
}

func (a guardedGuest) Start(ctx context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error) {
	p, err := a.g.Start(ctx, spec)
	return p, guestError(err)
}

func (a guardedGuest) Events(ctx context.Context, id string, after uint64) (agentproto.EventStream, error) {
	st, err := a.g.Events(ctx, id, after)
	if err != nil {
		return nil, guestError(err)
	}
	return guardedEvents{st}, nil
}

func (a guardedGuest) Stdin(ctx context.Context, id string, data []byte, eof bool) error {
	return guestError(a.g.Stdin(ctx, id, data, eof))
}

func (a guardedGuest) Signal(ctx context.Context, id, signal string) error {
	return guestError(a.g.Signal(ctx, id, signal))
}

func (a guardedGuest) Resize(ctx context.Context, id string, rows, cols uint16) error {
	return guestError(a.g.Resize(ctx, id, rows, cols))
}

func (a guardedGuest) Get(ctx context.Context, id string) (agentproto.ProcessInfo, error) {
	p, err := a.g.Get(ctx, id)
	return p, guestError(err)
}

func (a guardedGuest) List(ctx context.Context) ([]agentproto.ProcessInfo, error) {
	ps, err := a.g.List(ctx)
	return ps, guestError(err)
}

func (a guardedGuest) ReadFile(ctx context.Context, path string) (io.ReadCloser, agentproto.FileInfo, error) {
	r, fi, err := a.g.ReadFile(ctx, path)
	return r, fi, guestError(err)
}

func (a guardedGuest) WriteFile(ctx context.Context, path string, mode uint32, size int64, r io.Reader) (agentproto.FileInfo, error) {
	fi, err := a.g.WriteFile(ctx, path, mode, size, r)
	return fi, guestError(err)
}

func (a guardedGuest) ListDir(ctx context.Context, path string) ([]agentproto.FileInfo, error) {
	fs, err := a.g.ListDir(ctx, path)
	return fs, guestError(err)
}

func (a guardedGuest) Stat(ctx context.Context, path string) (agentproto.FileInfo, error) {
	fi, err := a.g.Stat(ctx, path)
	return fi, guestError(err)
}

func (a guardedGuest) Delete(ctx context.Context, path string, recursive bool) error {
	return guestError(a.g.Delete(ctx, path, recursive))
}

func (a guardedGuest) TarOut(ctx context.Context, path string) (io.ReadCloser, error) {
	r, err := a.g.TarOut(ctx, path)
	return r, guestError(err)
}

func (a guardedGuest) TarIn(ctx context.Context, path string, r io.Reader) error {
	return guestError(a.g.TarIn(ctx, path, r))
}

func (a guardedGuest) ListPorts(ctx context.Context) ([]agentproto.ListeningPort, error) {
	ps, err := a.g.ListPorts(ctx)
	return ps, guestError(err)
}

func (a guardedGuest) DialPort(ctx context.Context, port uint16) (net.Conn, error) {
	c, err := a.g.DialPort(ctx, port)
	return c, guestError(err)
}

type guardedEvents struct{ agentproto.EventStream }

// Next is the stream's next event; an exit event that says nothing of the
// exit gets an empty one, which ExitOf records as lost.
func (s guardedEvents) Next() (agentproto.Event, error) {
	ev, err := s.EventStream.Next()
	if err == nil && ev.Type == agentproto.EventExit && ev.Exit == nil {
		ev.Exit = &agentproto.ExitStatus{}
	}
	return ev, guestError(err)
}
