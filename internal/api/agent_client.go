package api

import (
	"context"
	"fmt"
	"io"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// clientAgent adapts *agentclient.Client to guestAgent.
type clientAgent struct{ c *agentclient.Client }

func notYet() error { return fmt.Errorf("agent client not available yet: %w", errdefs.ErrUnavailable) }

func (a clientAgent) Start(ctx context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error) {
	return agentproto.ProcessInfo{}, notYet()
}
func (a clientAgent) Events(ctx context.Context, id string, after uint64) (eventStream, error) {
	return nil, notYet()
}
func (a clientAgent) Stdin(ctx context.Context, id string, data []byte, eof bool) error { return notYet() }
func (a clientAgent) Signal(ctx context.Context, id, signal string) error            { return notYet() }
func (a clientAgent) Resize(ctx context.Context, id string, rows, cols uint16) error { return notYet() }
func (a clientAgent) Get(ctx context.Context, id string) (agentproto.ProcessInfo, error) {
	return agentproto.ProcessInfo{}, notYet()
}
func (a clientAgent) List(ctx context.Context) ([]agentproto.ProcessInfo, error) { return nil, notYet() }
func (a clientAgent) ReadFile(ctx context.Context, path string) (agentproto.FileInfo, io.ReadCloser, error) {
	return agentproto.FileInfo{}, nil, notYet()
}
func (a clientAgent) WriteFile(ctx context.Context, path string, mode uint32, r io.Reader) (agentproto.FileInfo, error) {
	return agentproto.FileInfo{}, notYet()
}
func (a clientAgent) ListDir(ctx context.Context, path string) ([]agentproto.FileInfo, error) {
	return nil, notYet()
}
func (a clientAgent) Stat(ctx context.Context, path string) (agentproto.FileInfo, error) {
	return agentproto.FileInfo{}, notYet()
}
func (a clientAgent) Delete(ctx context.Context, path string, recursive bool) error { return notYet() }
func (a clientAgent) TarOut(ctx context.Context, path string) (io.ReadCloser, error) {
	return nil, notYet()
}
func (a clientAgent) TarIn(ctx context.Context, path string, r io.Reader) error { return notYet() }
