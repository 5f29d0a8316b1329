package ratelimit

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A request reads downward: CONTRIBUTING.md lists the package's files in
// the order a request meets them (door, Limiter, store), and a file calls
// only functions of its own or of files below it in that list. A call
// through an interface (store.Store, Counter) is no call to a file: the caller
// names the interface, not what implements it. Every file of the package
// is in the list.
func TestFilesCallDownTheFileMap(t *testing.T) {
	order := fileMap(t)
	fset, files := parsePackage(t)
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", exportData(t))}
	if _, err := conf.Check("github.com/gatewaykit/ratelimit", fset, files, info); err != nil {
		t.Fatal(err)
	}
	rank := func(pos token.Pos) (string, int) {
		name := filepath.Base(fset.Position(pos).Filename)
		return name, slices.Index(order, name)
	}
	for _, f := range files {
		caller, at := rank(f.Pos())
		if at < 0 {
			t.Errorf("%s is not in CONTRIBUTING.md's file map", caller)
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			id := calledIdent(call.Fun)
			if id == nil {
				return true
			}
			fn, ok := info.Uses[id].(*types.Func)
			if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "github.com/gatewaykit/ratelimit" || isInterfaceMethod(fn) {
				return true
			}
			if callee, to := rank(fn.Pos()); to < at {
				t.Errorf("%s calls %s of %s, a file above it in CONTRIBUTING.md's file map", fset.Position(call.Pos()), fn.Name(), callee)
			}
			return true
		})
	}
}

// calledIdent is the name a call's function is written with: f, x.f,
// f[T], x.f[T]; nil for a function value made otherwise.
func calledIdent(fun ast.Expr) *ast.Ident {
	switch e := fun.(type) {
	case *ast.Ident:
		return e
	case *ast.SelectorExpr:
		return e.Sel
	case *ast.IndexExpr:
		return calledIdent(e.X)
	case *ast.IndexListExpr:
		return calledIdent(e.X)
	case *ast.ParenExpr:
		return calledIdent(e.X)
	}
	return nil
}

// isInterfaceMethod reports whether fn is a method of an interface.
func isInterfaceMethod(fn *types.Func) bool {
	recv := fn.Signature().Recv()
	return recv != nil && types.IsInterface(recv.Type())
}

// fileMap returns the root package's files in the order of CONTRIBUTING.md's
// table "The files, in the order a request meets them".
func fileMap(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## The files, in the order a request meets them")
	if !ok {
		t.Fatal("CONTRIBUTING.md has no section \"The files, in the order a request meets them\"")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_]+\\.go)` \\|")
	var order []string
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		order = append(order, m[1])
	}
	if len(order) == 0 {
		t.Fatal("CONTRIBUTING.md's file map lists no file")
	}
	return order
}

// exportData finds the compiled export data of the package's imports, as
// the go command built them, for the type checker.
func exportData(t *testing.T) func(path string) (io.ReadCloser, error) {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	lines := bufio.NewScanner(bytes.NewReader(out))
	for lines.Scan() {
		if path, file, ok := strings.Cut(lines.Text(), " "); ok && file != "" {
			files[path] = file
		}
	}
	return func(path string) (io.ReadCloser, error) {
		file, ok := files[path]
		if !ok {
			return nil, os.ErrNotExist
		}
		return os.Open(file)
	}
}
