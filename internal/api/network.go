package api

import (
	"encoding/json"
	"net/http"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
)

// featureNetworkLog gates GET /v1/sandboxes/{id}/network/log.
const featureNetworkLog = "network_log"

// policyFields validates a network object into fields (field path ->
// problem) and returns it compacted; an absent or null object is nil (deny
// all egress). The rule is the domain's (sandbox.PolicyFields).
func policyFields(raw json.RawMessage, fields map[string]string) json.RawMessage {
	return sandbox.PolicyFields(raw, fields)
}

// fieldsOf turns a validation error with per-field details into the API's
// 400 shape (details.fields); other errors pass through.
func fieldsOf(err error) error {
	if errdefs.ClassOf(err) != errdefs.ErrInvalidArgument {
		return err
	}
	f := map[string]string{}
	sandbox.MergeFields(err, "body", f)
	return invalid(f)
}

// networkRule are the states in which a sandbox's policy can be replaced.
var networkRule = sandbox.RuleOf(sandbox.Network)

// putNetwork replaces a sandbox's policy; the worker applies it at once.
func (s *Server) putNetwork(w http.ResponseWriter, r *http.Request) error {
	var raw json.RawMessage
	if err := decodeJSON(r, &raw, false); err != nil {
		return err
	}
	f := map[string]string{}
	policy := policyFields(raw, f)
	if len(f) > 0 {
		return invalid(f)
	}
	if policy == nil {
		policy = json.RawMessage(`{"egress":{"default":"deny"}}`)
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	sb, err = s.svc.SetNetwork(r.Context(), sb, policy)
	if err != nil {
		return fieldsOf(err)
	}
	s.log(r).Info("sandbox network policy replaced", "sandbox", sb.ID)
	writeJSON(w, http.StatusOK, s.sandboxView(sb))
	return nil
}

// networkLog returns the sandbox's egress audit records (incubating).
func (s *Server) networkLog(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireFeature(featureNetworkLog); err != nil {
		return err
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	if err := networkRule.Check(sb); err != nil {
		return err
	}
	recs, err := s.svc.NetworkLog(r.Context(), sb.ID)
	if err != nil {
		return err
	}
	out := apiv1.NetworkLog{Records: make([]apiv1.NetworkRecord, 0, len(recs))}
	for _, rec := range recs {
		out.Records = append(out.Records, apiv1.NetworkRecord{
			Time: rec.Time.UTC(), Kind: rec.Kind, Destination: rec.Destination, Upstream: rec.Upstream,
			Allowed: rec.Allowed, Rule: rec.Rule, BytesOut: rec.BytesOut, BytesIn: rec.BytesIn, Injected: rec.Injected,
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
