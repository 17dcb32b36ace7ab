package convention

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/space-sandbox/space"

// pkg is what `go list -json` says of one package of the module.
type pkg struct {
	ImportPath string
	Dir        string
	Doc        string
	GoFiles    []string
	Deps       []string
	Imports    []string
}

func listModule(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json", module+"/...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// internalDeps are p's transitive dependencies inside the module.
func internalDeps(p pkg) []string {
	var out []string
	for _, d := range p.Deps {
		if strings.HasPrefix(d, module+"/") {
			out = append(out, strings.TrimPrefix(d, module+"/"))
		}
	}
	return out
}

func rel(p pkg) string { return strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/") }

func under(path, prefix string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }

// TestImports pins which packages may depend on which (transitively).
func TestImports(t *testing.T) {
	// The client side links nothing of the server: the CLI binary and the
	// Go client stay small and safe to vendor.
	clientSide := []string{"cmd/space", "internal/cli", "internal/client", "internal/mcp"}
	clientMay := []string{"internal/api/apiv1", "internal/errdefs", "internal/strictjson", "internal/client", "internal/cli", "internal/mcp", "internal/version"}
	// The guest agent links only the protocol and the error taxonomy.
	agentSide := []string{"cmd/space-agent", "internal/agent"}
	agentMay := []string{"internal/agent", "internal/agentproto", "internal/errdefs"}
	rules := []struct {
		who    []string
		except string   // a package under who the rule does not cover
		mayNot []string // prefixes
		onlyOf []string // when set: every internal dep must be one of these (or under them)
	}{
		{who: clientSide, onlyOf: clientMay},
		{who: agentSide, onlyOf: agentMay},
		// A worker knows nothing of the API, the store or operations.
		{who: []string{"internal/worker"}, mayNot: []string{"internal/api", "internal/store", "internal/operation", "internal/server"}},
		// A VMM driver knows nothing of workers or anything above them.
		{who: []string{"internal/vmm"}, mayNot: []string{"internal/worker", "internal/api", "internal/store", "internal/operation", "internal/server"}},
		// The control-plane domain knows nothing of HTTP's edge or the wiring.
		{who: []string{"internal/sandbox"}, mayNot: []string{"internal/api", "internal/server"}},
		// A keyed lock is a leaf, and so are the per-sandbox budgets.
		{who: []string{"internal/keylock"}, onlyOf: []string{}},
		{who: []string{"internal/budget"}, onlyOf: []string{}},
		// The special-purpose address ranges every guard refuses are a leaf.
		{who: []string{"internal/netrange"}, onlyOf: []string{}},
		// What a build says of itself is a leaf every binary links.
		{who: []string{"internal/version"}, onlyOf: []string{}},
		// Cluster mode's Kubernetes side is the Worker contract seen from
		// Kubernetes: it knows nothing of the API, the store or operations.
		{who: []string{"internal/cluster"}, mayNot: []string{"internal/api", "internal/sandbox", "internal/store", "internal/operation", "internal/server"}},
		// The worker protocol's generated code stands on nothing of ours.
		{who: []string{"internal/workerpb"}, onlyOf: []string{"internal/workerpb"}},
		// The server binary links no test rig (testenv, kuberig).
		{who: []string{"cmd/spaced", "internal/server"}, mayNot: []string{"internal/testenv", "internal/devcluster"}},
		// The object store client knows only the error taxonomy: no worker,
		// API, store or VMM, so any of them can use it.
		{who: []string{"internal/objstore"}, onlyOf: []string{"internal/objstore", "internal/errdefs"}},
		// Nothing but mains and the server wiring imports the server package.
		{who: []string{"internal"}, except: "internal/server", mayNot: []string{"internal/server"}},
	}
	matched := make([]int, len(rules))
	for _, p := range listModule(t) {
		name := rel(p)
		for i, r := range rules {
			applies := false
			for _, w := range r.who {
				if under(name, w) {
					applies = true
				}
			}
			if !applies || (r.except != "" && under(name, r.except)) {
				continue
			}
			matched[i]++
			for _, d := range internalDeps(p) {
				for _, bad := range r.mayNot {
					if under(d, bad) {
						t.Errorf("%s depends on %s", name, d)
					}
				}
				if r.onlyOf != nil {
					ok := false
					for _, allowed := range r.onlyOf {
						if under(d, allowed) {
							ok = true
						}
					}
					if !ok {
						t.Errorf("%s depends on %s; it may depend only on %v", name, d, r.onlyOf)
					}
				}
			}
		}
	}
	for i, r := range rules {
		if matched[i] == 0 {
			t.Errorf("import rule for %v matched no package: the tree moved, update the rule", r.who)
		}
	}
}

// maxLines bounds a non-test source file: past it a file does more than one
// thing and is split by concern.
const maxLines = 500

func TestFileSize(t *testing.T) {
	for _, p := range listModule(t) {
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			if generated(t, path) {
				continue // made by a tool from a source that is checked itself
			}
			n, err := countLines(path)
			if err != nil {
				t.Fatal(err)
			}
			if n > maxLines {
				t.Errorf("%s/%s has %d lines (at most %d outside tests)", rel(p), f, n, maxLines)
			}
		}
	}
}

// generatedHeader is Go's mark of a generated file (go.dev/s/generatedcode).
var generatedHeader = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

// generated reports whether path carries the mark before its package clause.
func generated(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if generatedHeader.MatchString(line) {
			return true
		}
		if strings.HasPrefix(line, "package ") {
			return false
		}
	}
	return false
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
	}
	return n, sc.Err()
}

// TestPackageComments: every package says what it owns.
func TestPackageComments(t *testing.T) {
	for _, p := range listModule(t) {
		if len(p.GoFiles) > 0 && strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s has no package comment", rel(p))
		}
	}
}
