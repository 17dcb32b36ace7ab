package rig

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/worker"
)

// Run starts spec as process id in the guest c reaches and reads its events
// to the exit. It returns the stdout bytes seen, copied to stdout when that
// is not nil, and fails on a non-zero exit, on an output gap, and on a
// stream that ends without an exit.
func Run(ctx context.Context, c worker.Guest, id string, spec agentproto.ProcessSpec, stdout io.Writer) (int64, error) {
	spec.ID = id
	if _, err := c.Start(ctx, spec); err != nil {
		return 0, err
	}
	s, err := c.Events(ctx, id, 0)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	var n int64
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return n, fmt.Errorf("%s: events ended without an exit", id)
		}
		if err != nil {
			return n, fmt.Errorf("%s: no exit: %w", id, err)
		}
		switch ev.Type {
		case agentproto.EventStdout:
			n += int64(len(ev.Data))
			if stdout != nil {
				if _, err := stdout.Write(ev.Data); err != nil {
					return n, err
				}
			}
		case agentproto.EventGap:
			return n, fmt.Errorf("%s: output gap of %d bytes", id, ev.LostBytes)
		case agentproto.EventExit:
			if ev.Exit.ExitCode == nil || *ev.Exit.ExitCode != 0 {
				return n, fmt.Errorf("%s exited %+v", id, ev.Exit)
			}
			return n, nil
		}
	}
}
