package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
)

// lifecycleProbe serves a worker over the worker protocol and counts, per
// sandbox, the lifecycle calls in flight at once: what the control plane
// asks of the real worker path (placement, the worker protocol, the
// worker), held a little so that calls from two replicas would overlap.
type lifecycleProbe struct {
	worker.Worker
	hold time.Duration

	mu    sync.Mutex
	now   map[string]int
	most  int
	calls int
}

func newLifecycleProbe(w worker.Worker) *lifecycleProbe {
	return &lifecycleProbe{Worker: w, hold: 300 * time.Millisecond, now: map[string]int{}}
}

func (p *lifecycleProbe) enter(id string) func() {
	p.mu.Lock()
	p.now[id]++
	p.calls++
	p.most = max(p.most, p.now[id])
	p.mu.Unlock()
	time.Sleep(p.hold)
	return func() {
		p.mu.Lock()
		p.now[id]--
		p.mu.Unlock()
	}
}

func (p *lifecycleProbe) seen() (calls, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, p.most
}

func (p *lifecycleProbe) PauseSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	defer p.enter(id)()
	return p.Worker.PauseSandbox(ctx, id)
}

func (p *lifecycleProbe) ResumeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	defer p.enter(id)()
	return p.Worker.ResumeSandbox(ctx, id)
}

func (p *lifecycleProbe) SuspendSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	defer p.enter(id)()
	return p.Worker.SuspendSandbox(ctx, id)
}

func (p *lifecycleProbe) WakeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	defer p.enter(id)()
	return p.Worker.WakeSandbox(ctx, id)
}

func (p *lifecycleProbe) Checkpoint(ctx context.Context, sandboxID, checkpointID string) (worker.CheckpointStatus, error) {
	defer p.enter(sandboxID)()
	return p.Worker.Checkpoint(ctx, sandboxID, checkpointID)
}

func (p *lifecycleProbe) RestoreCheckpoint(ctx context.Context, sandboxID, checkpointID string) (worker.SandboxStatus, error) {
	defer p.enter(sandboxID)()
	return p.Worker.RestoreCheckpoint(ctx, sandboxID, checkpointID)
}

// leaderOf waits until exactly one replica has said it leads and returns
// it and the other.
func (c *controlCluster) leaderOf(t *testing.T, a, b *replica) (leader, other *replica) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		la, lb := c.logs.count("who="+a.name, "msg=leading"), c.logs.count("who="+b.name, "msg=leading")
		switch {
		case la == 1 && lb == 0:
			leader, other = a, b
		case la == 0 && lb == 1:
			leader, other = b, a
		default:
			return fmt.Errorf("replicas leading: %s %d, %s %d", a.name, la, b.name, lb)
		}
		return nil
	})
	return leader, other
}

// TestControlReplicaOperations: operations across two control replicas.
// Operations on one sandbox submitted through both reach the worker one at
// a time and all succeed; a sandbox used only through the replica that does not lead is
// not idle-suspended by the leader, which suspends it once it is idle; and
// the exit of a sandbox whose Pod failed is recorded by the replica that
// does not lead while the leader, cut from the database, still holds the
// leader Lease.
func TestControlReplicaOperations(t *testing.T) {
	c := newControlCluster(t)
	var probes []*lifecycleProbe
	wrap := func(w worker.Worker) worker.Worker {
		p := newLifecycleProbe(w)
		probes = append(probes, p)
		return p
	}
	n1, n2 := c.addNodeServing("a", wrap), c.addNodeServing("b", wrap)
	nodes := map[string]*testNode{n1.name: n1, n2.name: n2}
	r1, r2 := c.startReplica("r1"), c.startReplica("r2")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := r1.admin.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	key, err := r2.admin.CreateKey(ctx, "acme", false)
	if err != nil {
		t.Fatal(err)
	}
	via := map[*replica]*client.Client{}
	via[r1], _ = client.New(r1.url, key.Key, nil)
	via[r2], _ = client.New(r2.url, key.Key, nil)
	create := func(through *replica, req apiv1.CreateSandboxRequest) string {
		t.Helper()
		res, err := via[through].CreateSandbox(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		op, err := via[through].WaitOperation(ctx, res.Operation.ID)
		if err != nil || op.State != apiv1.OpSucceeded {
			t.Fatalf("create = %+v, %v", op, err)
		}
		return res.Sandbox.ID
	}

	t.Run("OneAtATimeOnTheWorker", func(t *testing.T) {
		id := create(r1, apiv1.CreateSandboxRequest{Template: "base"})
		// Checkpoints (they leave the state as it is, so each is accepted)
		// through both replicas at once: each replica would run its own one
		// after another, but not beside the other's.
		var opIDs []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 6 {
			through := via[r1]
			if i%2 == 1 {
				through = via[r2]
			}
			wg.Go(func() {
				res, err := through.CreateCheckpoint(ctx, id, fmt.Sprintf("c%d", i))
				if err != nil {
					t.Errorf("checkpoint %d: %v", i, err)
					return
				}
				mu.Lock()
				opIDs = append(opIDs, res.Operation.ID)
				mu.Unlock()
			})
		}
		wg.Wait()
		for _, opID := range opIDs {
			op, err := via[r1].WaitOperation(ctx, opID)
			if err != nil || op.State != apiv1.OpSucceeded {
				t.Errorf("operation %s = %+v (error %+v), %v; want succeeded", opID, op, op.Error, err)
			}
		}
		calls, most := 0, 0
		for _, p := range probes {
			c, m := p.seen()
			calls, most = calls+c, max(most, m)
		}
		if calls < len(opIDs) || most != 1 {
			t.Fatalf("the workers saw %d lifecycle calls for %d operations, at most %d at once on one sandbox; want one at a time",
				calls, len(opIDs), most)
		}
		if sb, err := via[r2].GetSandbox(ctx, id); err != nil || sb.State != "running" {
			t.Fatalf("sandbox after its operations = %+v, %v", sb, err)
		}
	})

	leader, other := c.leaderOf(t, r1, r2)

	t.Run("IdleAcrossReplicas", func(t *testing.T) {
		const idle = 4 // seconds: a quarter of it is the activity flush
		id := create(other, apiv1.CreateSandboxRequest{Template: "base", IdleTimeoutSeconds: idle})
		// Used only through the replica that does not lead, for three
		// idle timeouts: the leader must see that activity.
		end := time.Now().Add(3 * idle * time.Second)
		for time.Now().Before(end) {
			out, err := via[other].Exec(ctx, id, apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{Argv: []string{"sh", "-c", "true"}}})
			if err != nil || out.ExitCode == nil || *out.ExitCode != 0 {
				sb, _ := via[other].GetSandbox(ctx, id)
				t.Fatalf("exec through %s = %+v, %v (sandbox %+v): the leader %s took a used sandbox for idle",
					other.name, out, err, sb, leader.name)
			}
			if sb, err := via[other].GetSandbox(ctx, id); err != nil || sb.State != "running" {
				t.Fatalf("sandbox used through %s = %+v, %v; want running", other.name, sb, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		// Left alone, the leader suspends it.
		testenv.Eventually(t, 60*time.Second, func() error {
			sb, err := via[leader].GetSandbox(ctx, id)
			if err != nil {
				return err
			}
			if sb.State != "suspended" {
				return fmt.Errorf("idle sandbox is %s", sb.State)
			}
			return nil
		})
	})

	t.Run("ExitOnTheReplicaThatDoesNotLead", func(t *testing.T) {
		id := create(other, apiv1.CreateSandboxRequest{Template: "base"})
		sb, err := via[other].GetSandbox(ctx, id)
		if err != nil || nodes[sb.Worker] == nil {
			t.Fatalf("sandbox = %+v, %v", sb, err)
		}
		// The leader is cut from the database: dead to the store, it
		// still renews the leader Lease through Kubernetes.
		leader.cut()
		// Its VM goes without a word to the control plane: the node
		// agent fails its Pod.
		if err := nodes[sb.Worker].w.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			sb, err := via[other].GetSandbox(ctx, id)
			if err != nil {
				return err
			}
			if sb.State != "failed" || sb.LastError == nil || sb.LastError.Code != "unavailable" {
				return fmt.Errorf("sandbox whose Pod failed: state %s, last_error %+v", sb.State, sb.LastError)
			}
			return nil
		})
		if n := c.logs.count("who="+other.name, "msg=leading"); n != 0 {
			t.Fatalf("%s took the lead before it recorded the exit (%d); the point is that it did not need to", other.name, n)
		}
	})
}
