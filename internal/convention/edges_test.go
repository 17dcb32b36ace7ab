package convention

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The edges translate a protocol (HTTP /v1, E2B's API, MCP) into calls of
// the domain, sandbox.Service, and call neither the store nor the worker
// themselves: what a read or a change means is decided once, in the
// Service, and every edge gets the same answer.
//
// The rule, precisely: no non-test file of an edge package uses (calls, or
// takes as a method value) a function or method declared in
// internal/store or internal/worker (or a package under them) whose first
// parameter is a context.Context. Every call that reaches persistence or a
// VM takes one; what takes none is a value helper (store.NewID) or a
// method of a domain value (store.SandboxState.Live), which edges may use,
// as they may name those packages' types. A guest's files and processes
// are the Service's calls too (ReadFile, Exec, FollowCommand, …): the
// methods of worker.Guest are not an exception. The one exception is
// store.All, a pure iterator over the list function the edge passes it
// (which the rule checks itself: a store method passed to it is caught).
var edgePackages = []string{"internal/api", "internal/e2b", "internal/mcp"}

// edgeExcept are packages under an edge that the rule does not cover: the
// API's test rig is a fake worker.
var edgeExcept = []string{"internal/api/apitest"}

var edgeForbidden = []string{"internal/store", "internal/worker"}

// TestEdgesCallTheService checks the rule above on the edges.
func TestEdgesCallTheService(t *testing.T) {
	exports := exportData(t, edgePackages...)
	n := 0
	for _, p := range listModule(t) {
		name := rel(p)
		covered := false
		for _, e := range edgePackages {
			covered = covered || under(name, e)
		}
		for _, e := range edgeExcept {
			covered = covered && !under(name, e)
		}
		if !covered || len(p.GoFiles) == 0 {
			continue
		}
		n++
		for _, v := range edgeCalls(t, exports, p.ImportPath, p.Dir, p.GoFiles) {
			t.Errorf("%s: %s: an edge calls the Service, not the store or the worker", name, v)
		}
	}
	if n < len(edgePackages) {
		t.Errorf("the edge rule covered %d packages, want at least %d: the tree moved, update edgePackages", n, len(edgePackages))
	}
}

// TestEdgeRuleCatches: the rule finds a deliberate violation
// (testdata/edgecall) and passes what it allows there.
func TestEdgeRuleCatches(t *testing.T) {
	exports := exportData(t, "internal/store", "internal/worker")
	dir := filepath.Join("testdata", "edgecall")
	got := edgeCalls(t, exports, "example.com/edgecall", dir, []string{"edge.go"})
	want := []string{
		"edge.go:20: store.Store.GetSandbox",
		"edge.go:21: worker.Worker.Ready",
		"edge.go:22: worker.Guest.List",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// exportData maps every package the named module packages depend on to
// its compiled export data (go list -export), for the type checker.
func exportData(t *testing.T, pkgs ...string) map[string]string {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-json=ImportPath,Export"}
	for _, p := range pkgs {
		args = append(args, module+"/"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.Bytes())
	}
	m := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		m[p.ImportPath] = p.Export
	}
	return m
}

// edgeCalls type-checks the files of one package and returns each use of
// a forbidden function or method as "file:line: pkg.Type.Method".
func edgeCalls(t *testing.T, exports map[string]string, path, dir string, files []string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, af)
	}
	imp := importer.ForCompiler(fset, "gc", func(p string) (io.ReadCloser, error) {
		f, ok := exports[p]
		if !ok || f == "" {
			return nil, os.ErrNotExist
		}
		return os.Open(f)
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: imp, Error: func(err error) { t.Errorf("type-check %s: %v", path, err) }}
	if _, err := conf.Check(path, fset, parsed, info); err != nil {
		t.Fatalf("type-check %s: %v", path, err)
	}
	var out []string
	for id, obj := range info.Uses {
		fn, ok := obj.(*types.Func)
		if !ok || fn.Pkg() == nil || !forbiddenPkg(fn.Pkg().Path()) {
			continue
		}
		sig := fn.Type().(*types.Signature)
		if sig.Params().Len() == 0 || sig.Params().At(0).Type().String() != "context.Context" {
			continue
		}
		if sig.Recv() == nil && fn.Pkg().Path() == module+"/internal/store" && fn.Name() == "All" {
			continue
		}
		what := fn.Pkg().Name() + "." + fn.Name()
		if recv := sig.Recv(); recv != nil {
			rt := recv.Type()
			if p, ok := rt.(*types.Pointer); ok {
				rt = p.Elem()
			}
			if n, ok := rt.(*types.Named); ok {
				what = fn.Pkg().Name() + "." + n.Obj().Name() + "." + fn.Name()
			}
		}
		pos := fset.Position(id.Pos())
		out = append(out, filepath.Base(pos.Filename)+":"+strconv.Itoa(pos.Line)+": "+what)
	}
	sort.Strings(out)
	return out
}

func forbiddenPkg(path string) bool {
	for _, f := range edgeForbidden {
		if under(strings.TrimPrefix(path, module+"/"), f) && strings.HasPrefix(path, module+"/") {
			return true
		}
	}
	return false
}
