package sandbox

import (
	"context"
	"io"
	"path"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// The files of a running sandbox, for every edge: each call checks its
// path (CleanPath), that the sandbox runs, counts as activity, and goes to
// the guarded guest (guest.go).

// fileGuest is the guest of sb for a file call on p, and p cleaned.
func (s *Service) fileGuest(ctx context.Context, sb *store.Sandbox, p string) (worker.Guest, string, error) {
	p, err := CleanPath(p)
	if err != nil {
		return nil, "", err
	}
	if err := RequireState(sb, store.SandboxRunning); err != nil {
		return nil, "", err
	}
	s.Touch(ctx, sb.ID)
	g, err := s.Agent(ctx, sb.ID)
	return g, p, err
}

// ReadFile opens file p of sb for reading.
func (s *Service) ReadFile(ctx context.Context, sb *store.Sandbox, p string) (io.ReadCloser, agentproto.FileInfo, error) {
	g, p, err := s.fileGuest(ctx, sb, p)
	if err != nil {
		return nil, agentproto.FileInfo{}, err
	}
	return g.ReadFile(ctx, p)
}

// WriteFile writes r as file p of sb with permission bits mode, creating
// its parents. size is r's announced length (-1: unknown), which lets the
// guest tell a body cut short from a complete one: it then keeps nothing.
func (s *Service) WriteFile(ctx context.Context, sb *store.Sandbox, p string, mode uint32, size int64, r io.Reader) (agentproto.FileInfo, error) {
	g, p, err := s.fileGuest(ctx, sb, p)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	info, err := g.WriteFile(ctx, p, mode, size, r)
	if err != nil {
		return info, err
	}
	info.Name = path.Base(p)
	return info, nil
}

// ListDir lists directory p of sb.
func (s *Service) ListDir(ctx context.Context, sb *store.Sandbox, p string) ([]agentproto.FileInfo, error) {
	g, p, err := s.fileGuest(ctx, sb, p)
	if err != nil {
		return nil, err
	}
	return g.ListDir(ctx, p)
}

// DeleteFile removes p of sb (a directory with what it holds when
// recursive); "/" is refused.
func (s *Service) DeleteFile(ctx context.Context, sb *store.Sandbox, p string, recursive bool) error {
	g, p, err := s.fileGuest(ctx, sb, p)
	if err != nil {
		return err
	}
	if p == "/" {
		return errdefs.New(errdefs.ErrInvalidArgument, "refusing to delete /").
			WithDetails(map[string]any{"fields": map[string]string{"path": "must not be /"}})
	}
	return g.Delete(ctx, p, recursive)
}

// TarOut reads p of sb (a file or a directory tree) as a tar stream.
func (s *Service) TarOut(ctx context.Context, sb *store.Sandbox, p string) (io.ReadCloser, error) {
	g, p, err := s.fileGuest(ctx, sb, p)
	if err != nil {
		return nil, err
	}
	return g.TarOut(ctx, p)
}

// TarIn unpacks the tar stream r into directory p of sb.
func (s *Service) TarIn(ctx context.Context, sb *store.Sandbox, p string, r io.Reader) error {
	g, p, err := s.fileGuest(ctx, sb, p)
	if err != nil {
		return err
	}
	return g.TarIn(ctx, p, r)
}
