// Package workerpb is the worker protocol's messages, generated from
// proto/space/worker/v1/worker.proto by `make generate` (never edit the
// .pb.go by hand); workerpbconnect holds its Connect services. Only
// internal/worker/remote speaks it; everything else uses the worker
// contract (internal/worker).
package workerpb
