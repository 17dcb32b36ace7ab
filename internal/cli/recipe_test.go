package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRecipeMessages (issue 9, defect 11): a recipe of the wrong shape
// names the field and what was expected, never a Go type.
func TestLoadRecipeMessages(t *testing.T) {
	for _, tc := range []struct{ recipe, want string }{
		{`{"name":"x","source":[]}`, "source: must be a JSON object, not an array"},
		{`{"name":"x","defaults":{"vcpus":"2"}}`, "defaults.vcpus: must be an integer, not a string"},
		{`{"name":"x","sauce":{}}`, "sauce: is not a known field"},
	} {
		p := filepath.Join(t.TempDir(), "r.json")
		if err := os.WriteFile(p, []byte(tc.recipe), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := loadRecipe(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "Go ") {
			t.Errorf("%s: %v, want %q", tc.recipe, err, tc.want)
		}
	}
}
