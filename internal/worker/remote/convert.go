package remote

import (
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb"
)

// Conversions between the worker contract's types and the wire's. A zero
// time travels as no timestamp, so it comes back zero.

func timeToPB(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeFromPB(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func specToPB(s worker.SandboxSpec) *workerpb.SandboxSpec {
	return &workerpb.SandboxSpec{
		Id: s.ID, Template: s.Template, Vcpus: int64(s.VCPUs), MemoryMib: int64(s.MemoryMiB), DiskMib: int64(s.DiskMiB),
		Env: s.Env, Hostname: s.Hostname, FromCheckpoint: s.FromCheckpoint, Network: s.Network, SecretScope: s.SecretScope,
		FromSnapshot: s.FromSnapshot,
	}
}

func specFromPB(p *workerpb.SandboxSpec) worker.SandboxSpec {
	s := worker.SandboxSpec{
		ID: p.GetId(), Template: p.GetTemplate(), VCPUs: int(p.GetVcpus()), MemoryMiB: int(p.GetMemoryMib()),
		DiskMiB: int(p.GetDiskMib()), Env: p.GetEnv(), Hostname: p.GetHostname(), FromCheckpoint: p.GetFromCheckpoint(),
		FromSnapshot: p.GetFromSnapshot(),
		SecretScope:  p.GetSecretScope(),
	}
	if len(p.GetNetwork()) > 0 {
		s.Network = json.RawMessage(p.GetNetwork())
	}
	return s
}

func statusToPB(s worker.SandboxStatus) *workerpb.SandboxStatus {
	return &workerpb.SandboxStatus{
		Id: s.ID, State: string(s.State), VmmPid: int64(s.VMMPID), BootedAt: timeToPB(s.BootedAt), DiskBytes: s.DiskBytes,
		MemoryBytes: s.MemoryBytes, SnapshotBytes: s.SnapshotBytes, Restored: s.Restored, Lost: s.Lost,
		Spec: specToPB(s.Spec),
	}
}

func statusFromPB(p *workerpb.SandboxStatus) worker.SandboxStatus {
	return worker.SandboxStatus{
		ID: p.GetId(), State: worker.VMState(p.GetState()), VMMPID: int(p.GetVmmPid()), BootedAt: timeFromPB(p.GetBootedAt()),
		DiskBytes: p.GetDiskBytes(), MemoryBytes: p.GetMemoryBytes(), SnapshotBytes: p.GetSnapshotBytes(),
		Restored: p.GetRestored(), Lost: p.GetLost(), Spec: specFromPB(p.GetSpec()),
	}
}

func checkpointToPB(c worker.CheckpointStatus) *workerpb.CheckpointStatus {
	return &workerpb.CheckpointStatus{
		Id: c.ID, SandboxId: c.SandboxID, Spec: specToPB(c.Spec), CreatedAt: timeToPB(c.CreatedAt),
		SizeBytes: c.SizeBytes, Paused: durationpb.New(c.Paused),
	}
}

func checkpointFromPB(p *workerpb.CheckpointStatus) worker.CheckpointStatus {
	return worker.CheckpointStatus{
		ID: p.GetId(), SandboxID: p.GetSandboxId(), Spec: specFromPB(p.GetSpec()), CreatedAt: timeFromPB(p.GetCreatedAt()),
		SizeBytes: p.GetSizeBytes(), Paused: p.GetPaused().AsDuration(),
	}
}

func recordToPB(r worker.NetworkRecord) *workerpb.NetworkRecord {
	return &workerpb.NetworkRecord{
		Time: timeToPB(r.Time), Sandbox: r.Sandbox, Kind: r.Kind, Destination: r.Destination, Upstream: r.Upstream,
		Allowed: r.Allowed, Rule: r.Rule, BytesOut: r.BytesOut, BytesIn: r.BytesIn, Injected: r.Injected,
	}
}

func recordFromPB(p *workerpb.NetworkRecord) worker.NetworkRecord {
	return worker.NetworkRecord{
		Time: timeFromPB(p.GetTime()), Sandbox: p.GetSandbox(), Kind: p.GetKind(), Destination: p.GetDestination(),
		Upstream: p.GetUpstream(), Allowed: p.GetAllowed(), Rule: p.GetRule(), BytesOut: p.GetBytesOut(),
		BytesIn: p.GetBytesIn(), Injected: p.GetInjected(),
	}
}

// each converts every element of in with conv; an empty in gives an empty,
// not nil, out.
func each[A, B any](in []A, conv func(A) B) []B {
	out := make([]B, len(in))
	for i, a := range in {
		out[i] = conv(a)
	}
	return out
}
