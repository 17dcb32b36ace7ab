package api

import (
	"context"
	"io"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
)

// clientAgent adapts *agentclient.Client to guestAgent.
type clientAgent struct{ *agentclient.Client }

func (a clientAgent) Events(ctx context.Context, id string, after uint64) (eventStream, error) {
	s, err := a.Client.Events(ctx, id, after)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (a clientAgent) ReadFile(ctx context.Context, path string) (agentproto.FileInfo, io.ReadCloser, error) {
	rc, info, err := a.Client.ReadFile(ctx, path)
	return info, rc, err
}
