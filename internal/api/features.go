package api

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
)

// knownFeatures are the feature gates this server knows. Incubating ones are
// off unless the deployment enables them with --feature NAME.
var knownFeatures = []apiv1.Feature{
	{Name: "egress_https_inject", Stage: "incubating",
		Description: "credential injection for HTTPS requests (needs the platform CA in the guest trust store)"},
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

func (s *Server) listFeatures(w http.ResponseWriter, r *http.Request) {
	out := apiv1.FeatureList{Features: []apiv1.Feature{}}
	for _, f := range knownFeatures {
		f.Enabled = s.features[f.Name]
		out.Features = append(out.Features, f)
	}
	sort.Slice(out.Features, func(i, j int) bool { return out.Features[i].Name < out.Features[j].Name })
	writeJSON(w, http.StatusOK, out)
}
