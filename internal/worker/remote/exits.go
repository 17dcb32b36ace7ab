package remote

import (
	"context"
	"log/slog"
	"sync"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb"
)

// maxQueuedExits bounds the exits a server keeps while nobody watches;
// past it the oldest go (the control plane's reconcile finds those VMs
// stopped all the same).
const maxQueuedExits = 1024

// exitQueue takes a worker's exits as they come and keeps them until a
// WatchExits stream sends them: each exit to one watcher.
type exitQueue struct {
	mu    sync.Mutex
	queue []*workerpb.WatchExitsResponse
	ready chan struct{} // closed and replaced when an exit is queued
	done  chan struct{} // the pump ended
}

func newExitQueue(in <-chan worker.Exit, closing context.Context, log *slog.Logger) *exitQueue {
	q := &exitQueue{ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(q.done)
		for {
			select {
			case <-closing.Done():
				return
			case ex, ok := <-in:
				if !ok {
					return
				}
				// The cause (a console tail) stays in this log; the
				// wire carries its class and public words.
				log.Warn("sandbox VM stopped on its own", "sandbox", ex.SandboxID, "err", ex.Err)
				class, msg, _ := errdefs.Render(ex.Err)
				q.push(&workerpb.WatchExitsResponse{SandboxId: ex.SandboxID, ErrorClass: class.Code(), ErrorMessage: msg}, log)
			}
		}
	}()
	return q
}

func (q *exitQueue) push(ex *workerpb.WatchExitsResponse, log *slog.Logger) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) >= maxQueuedExits {
		log.Warn("no watcher took a VM exit; dropped", "sandbox", q.queue[0].GetSandboxId())
		q.queue = q.queue[1:]
	}
	q.queue = append(q.queue, ex)
	close(q.ready)
	q.ready = make(chan struct{})
}

// next waits for an exit (or ctx), taking it off the queue.
func (q *exitQueue) next(ctx context.Context) (*workerpb.WatchExitsResponse, error) {
	for {
		q.mu.Lock()
		if len(q.queue) > 0 {
			ex := q.queue[0]
			q.queue = q.queue[1:]
			q.mu.Unlock()
			return ex, nil
		}
		ready := q.ready
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ready:
		}
	}
}

// unget puts back an exit a stream failed to send, first in line.
func (q *exitQueue) unget(ex *workerpb.WatchExitsResponse) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append([]*workerpb.WatchExitsResponse{ex}, q.queue...)
	close(q.ready)
	q.ready = make(chan struct{})
}

func (q *exitQueue) wait() { <-q.done }
