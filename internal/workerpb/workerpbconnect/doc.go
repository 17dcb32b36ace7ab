// Package workerpbconnect is the worker protocol's Connect services
// (WorkerService, GuestService): handlers and clients generated from
// proto/space/worker/v1/worker.proto by `make generate`.
package workerpbconnect
