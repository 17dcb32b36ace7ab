package convention

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The E2B edge translates E2B's calls into calls of the Service; it never
// answers one by making a request of /v1 inside the process (a round trip
// through /v1's routing, middleware, JSON and error writer for every call,
// and a second reading of what /v1's answer means).
//
// The rule, precisely: no non-test file of internal/e2b imports
// net/http/httptest (in-process requests and recorders) or internal/api
// (the /v1 handler), and every call of a method named ServeHTTP there
// hands on the request its enclosing function was given (r, or
// r.WithContext(…) / r.Clone(…)): a pass-through of a request that is not
// E2B's, never a request of its own making.
const inprocEdge = "internal/e2b"

var inprocImports = []string{"net/http/httptest", module + "/internal/api"}

// TestE2BCallsNoV1InProcess checks the rule above on internal/e2b.
func TestE2BCallsNoV1InProcess(t *testing.T) {
	found := false
	for _, p := range listModule(t) {
		if rel(p) != inprocEdge {
			continue
		}
		found = true
		for _, v := range inprocViolations(t, p.Dir, p.GoFiles) {
			t.Errorf("%s: %s: the E2B edge calls the Service, not /v1 in-process", inprocEdge, v)
		}
	}
	if !found {
		t.Fatalf("package %s not found: the tree moved, update inprocEdge", inprocEdge)
	}
}

// TestInprocRuleCatches: the rule finds a deliberate violation
// (testdata/inproc) and passes the pass-through there.
func TestInprocRuleCatches(t *testing.T) {
	got := inprocViolations(t, filepath.Join("testdata", "inproc"), []string{"edge.go"})
	want := []string{
		`edge.go:7: imports "net/http/httptest"`,
		`edge.go:23: ServeHTTP of a request the function was not given`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// inprocViolations parses files of dir and returns each violation as
// "file:line: what".
func inprocViolations(t *testing.T, dir string, files []string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		at := func(pos token.Pos, format string, args ...any) {
			out = append(out, fmt.Sprintf("%s:%d: %s", name, fset.Position(pos).Line, fmt.Sprintf(format, args...)))
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			for _, bad := range inprocImports {
				if path == bad {
					at(im.Pos(), "imports %q", path)
				}
			}
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			checkServeHTTP(fd.Type, fd.Body, nil, at)
		}
	}
	return out
}

// checkServeHTTP reports the ServeHTTP calls in body whose request is not
// one of the *http.Request parameters of ft or of the functions around it
// (given).
func checkServeHTTP(ft *ast.FuncType, body *ast.BlockStmt, given map[string]bool, at func(token.Pos, string, ...any)) {
	reqs := map[string]bool{}
	for k := range given {
		reqs[k] = true
	}
	if ft.Params != nil {
		for _, f := range ft.Params.List {
			if star, ok := f.Type.(*ast.StarExpr); ok && isHTTPRequest(star.X) {
				for _, n := range f.Names {
					reqs[n.Name] = true
				}
			}
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			checkServeHTTP(n.Type, n.Body, reqs, at)
			return false
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if ok && sel.Sel.Name == "ServeHTTP" && (len(n.Args) != 2 || !handsOn(n.Args[1], reqs)) {
				at(n.Pos(), "ServeHTTP of a request the function was not given")
			}
		}
		return true
	})
}

func isHTTPRequest(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Request" {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "http"
}

// handsOn reports whether e is a request of reqs, as it came or with
// another context (r.WithContext(…), r.Clone(…)).
func handsOn(e ast.Expr, reqs map[string]bool) bool {
	if call, ok := e.(*ast.CallExpr); ok {
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "WithContext" && sel.Sel.Name != "Clone") {
			return false
		}
		e = sel.X
	}
	id, ok := e.(*ast.Ident)
	return ok && reqs[id.Name]
}
