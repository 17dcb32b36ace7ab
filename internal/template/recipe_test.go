package template

import (
	"errors"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

// TestLoadRecipeMessages (issue 9, defect 11): a recipe of the wrong shape
// is told which field and what was expected, never a Go type.
func TestLoadRecipeMessages(t *testing.T) {
	for _, tc := range []struct{ recipe, want string }{
		{`[]`, "document must be a JSON object, not an array"},
		{`{"name":"x","source":[]}`, "source: must be a JSON object, not an array"},
		{`{"name":"x","source":{"type":"debian","packages":"vim"}}`, "source.packages: must be an array of strings, not a string"},
		{`{"name":"x","source":{"tpye":"oci"}}`, "source.tpye: is not a known field"},
	} {
		_, err := LoadRecipe(writeFile(t, "r.json", []byte(tc.recipe)))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want invalid_argument saying %q", tc.recipe, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "BuildRequest")) {
			t.Errorf("%s: %v names Go types", tc.recipe, err)
		}
	}
}
