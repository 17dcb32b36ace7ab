package api

import (
	"encoding/json"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// TestBranchKeepsNetworkPolicy: a branch made without a network policy has
// its parent's (secrets stay references); one that names a policy has that.
func TestBranchKeepsNetworkPolicy(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	policy := json.RawMessage(`{"egress":{"default":"deny","allow":["api.example.com"]},` +
		`"inject":[{"domain":"api.example.com","header":"Authorization","value":"Bearer ${secret:example}"}]}`)
	res, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base", Network: policy})
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, &res.Operation, apiv1.OpSucceeded)
	ck, err := e.bob.CreateCheckpoint(ctx, res.Sandbox.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, &ck.Operation, apiv1.OpSucceeded)

	allows := func(raw json.RawMessage, domain string) bool {
		var p struct{ Egress struct{ Allow []string } }
		json.Unmarshal(raw, &p)
		return len(p.Egress.Allow) == 1 && p.Egress.Allow[0] == domain
	}
	br, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{FromCheckpoint: ck.Checkpoint.ID})
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, &br.Operation, apiv1.OpSucceeded)
	got, err := e.bob.GetSandbox(ctx, br.Sandbox.ID)
	if err != nil || !allows(got.Network, "api.example.com") {
		t.Fatalf("branch network = %s (%v), want the parent's", got.Network, err)
	}
	own := json.RawMessage(`{"egress":{"default":"deny","allow":["pypi.org"]}}`)
	br2, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{FromCheckpoint: ck.Checkpoint.ID, Network: own})
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, &br2.Operation, apiv1.OpSucceeded)
	if got, err := e.bob.GetSandbox(ctx, br2.Sandbox.ID); err != nil || !allows(got.Network, "pypi.org") {
		t.Fatalf("branch with its own policy = %s (%v)", got.Network, err)
	}
}
