package api

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
)

// FeatureEgressHTTPSInject gates HTTPS credential injection. It is a
// deployment switch (spaced creates the egress CA and the proxy intercepts
// TLS for inject domains only when it is on); no request field depends on
// it: with it off, inject rules apply to plain HTTP and TLS to an inject
// domain passes through untouched.
const FeatureEgressHTTPSInject = "egress_https_inject"

// knownFeatures are the feature gates this server knows. Incubating ones are
// off unless the deployment enables them with --feature NAME.
var knownFeatures = []apiv1.Feature{
	{Name: FeatureEgressHTTPSInject, Stage: "incubating",
		Description: "credential injection for HTTPS requests: TLS to a domain with inject rules is terminated by the egress proxy " +
			"with a leaf from the deployment's CA, which the agent adds to the guest trust store (off: TLS always passes through)"},
	{Name: featureNetworkLog, Stage: "incubating",
		Description: "GET /v1/sandboxes/{id}/network/log: the egress audit records of a sandbox"},
}

// KnownFeatures returns the names of the feature gates the server knows.
func KnownFeatures() []string {
	var names []string
	for _, f := range knownFeatures {
		names = append(names, f.Name)
	}
	return names
}

func featureSet(enabled []string) (map[string]bool, error) {
	set := map[string]bool{}
	for _, name := range enabled {
		known := false
		for _, f := range knownFeatures {
			known = known || f.Name == name
		}
		if !known {
			return nil, fmt.Errorf("unknown feature gate %q (known: %v): %w", name, KnownFeatures(), errdefs.ErrInvalidArgument)
		}
		set[name] = true
	}
	return set, nil
}

// requireFeature is the 400 a request gets for using a gated field or route
// while its gate is off.
func (s *Server) requireFeature(name string) error {
	if s.features[name] {
		return nil
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "feature %q is not enabled on this server", name).
		WithDetails(map[string]any{"feature": name})
}

func (s *Server) listFeatures(w http.ResponseWriter, r *http.Request) error {
	out := apiv1.FeatureList{Features: []apiv1.Feature{}}
	for _, f := range knownFeatures {
		f.Enabled = s.features[f.Name]
		out.Features = append(out.Features, f)
	}
	sort.Slice(out.Features, func(i, j int) bool { return out.Features[i].Name < out.Features[j].Name })
	writeJSON(w, http.StatusOK, out)
	return nil
}
