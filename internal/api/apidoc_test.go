package api

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The API reference, docs/api.md, gives every route a heading of its own,
// "### METHOD /path" as the route table spells it, and lists what the
// contract names but the server does not serve yet as "- `METHOD /path`"
// items of its section "Not yet available".
const apiReference = "../../docs/api.md"

var (
	routeHeadingRE = regexp.MustCompile("^### `?([A-Z]+ /[^ `]*)`?$")
	notYetItemRE   = regexp.MustCompile("^- `([A-Z]+ /[^`]*)`")
)

// apiReferenceRoutes reads the route headings of docs/api.md and the
// routes its "Not yet available" section lists.
func apiReferenceRoutes(t *testing.T) (documented map[string]int, notYet []string) {
	t.Helper()
	f, err := os.Open(apiReference)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	documented = map[string]int{}
	inNotYet := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inNotYet = strings.HasPrefix(line, "## Not yet available")
		}
		if m := routeHeadingRE.FindStringSubmatch(line); m != nil {
			documented[m[1]] = n
		}
		if m := notYetItemRE.FindStringSubmatch(line); m != nil && inNotYet {
			notYet = append(notYet, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return documented, notYet
}

// TestAPIReferenceCoversRoutes fails when a route of the route table has no
// heading in docs/api.md, when a heading names no route, and when the "Not
// yet available" section lists a route the server serves.
func TestAPIReferenceCoversRoutes(t *testing.T) {
	e := newEnv(t, Config{})
	documented, notYet := apiReferenceRoutes(t)
	served := map[string]bool{}
	for _, rt := range e.srv.routes {
		served[rt.pattern] = true
		if _, ok := documented[rt.pattern]; !ok {
			t.Errorf("route %q has no heading \"### %s\" in docs/api.md", rt.pattern, rt.pattern)
		}
	}
	for p, line := range documented {
		if !served[p] {
			t.Errorf("docs/api.md:%d documents %q, which is not a route (a route not built yet belongs under \"Not yet available\")", line, p)
		}
	}
	if len(notYet) == 0 {
		t.Error(`docs/api.md has no "Not yet available" list`)
	}
	for _, p := range notYet {
		if served[p] {
			t.Errorf("docs/api.md lists %q as not yet available, but the server serves it: document it", p)
		}
	}
}
