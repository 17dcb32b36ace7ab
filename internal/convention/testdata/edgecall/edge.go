// Package edgecall is a deliberate violation of TestEdgesCallTheService:
// an edge that reaches the store and the worker itself.
package edgecall

import (
	"context"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

type edge struct {
	st    store.Store
	wk    worker.Worker
	guest worker.Guest
	ready func(context.Context) error
}

func (e *edge) violates(ctx context.Context) {
	_, _ = e.st.GetSandbox(ctx, "ten_a", "sbx_a") // a store call
	e.ready = e.wk.Ready                          // a worker method, as a value
	_, _ = e.guest.List(ctx)                      // a guest call: the Service's
}

func (e *edge) keeps(ctx context.Context, sb *store.Sandbox) bool {
	_ = store.NewID(store.PrefixSandbox) // a value helper: takes no context
	return sb.State.Live()               // a method of a domain value
}
