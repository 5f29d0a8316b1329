package ratelimit

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The layering is held by the compiler and by these tests, not by habit:
// the engines live in packages under internal/ that never import this one,
// each file keeps to one concern, and the surface a user learns stays
// small.

// What a user learns: the package's exported names, beside struct fields:
// at most 80 when the store seam landed, and the four the token bucket's
// issue names since (TokenBucket, Limiter.Wait, Limiter.WaitN,
// Limiter.Settle), and the eight of the sequence every middleware runs,
// which a module of its own (fiberv3, a gRPC interceptor) builds on:
// Middleware and its four methods, MiddlewareConfig, NewMiddleware,
// Limiter.TenantOf (90: two had gone to package store meanwhile); 82
// since the store's contract (Store, Request, Answer, StoreInfo and their
// methods) lives in package store, CounterStore being the root's one new
// name; 83 since Metrics.OnRoundTrip hands each round trip to a histogram
// of another library (OpenTelemetry's, in the ratelimitotel module); 84
// since Limiter.GiveBack returns units without their Decision, which a
// request of another process cannot carry (Envoy's negative hits, in the
// envoyrls module).
const maxExportedNames = 84

// parsePackage parses the package's own files, its tests left out, with
// their comments.
func parsePackage(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range sources {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// exportedNames returns the package's exported names as godoc shows them:
// types, funcs, consts, vars, and the methods of exported types and
// interfaces, as "Type.Method".
func exportedNames(t *testing.T) []string {
	t.Helper()
	fset, files := parsePackage(t)
	d, err := doc.NewFromFiles(fset, files, "github.com/gatewaykit/ratelimit")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			names = append(names, v.Names...)
		}
	}
	funcs := func(prefix string, fs []*doc.Func) {
		for _, f := range fs {
			names = append(names, prefix+f.Name)
		}
	}
	values(d.Consts)
	values(d.Vars)
	funcs("", d.Funcs)
	for _, typ := range d.Types {
		names = append(names, typ.Name)
		values(typ.Consts)
		values(typ.Vars)
		funcs("", typ.Funcs)
		funcs(typ.Name+".", typ.Methods)
		for _, spec := range typ.Decl.Specs {
			it, ok := spec.(*ast.TypeSpec).Type.(*ast.InterfaceType)
			if !ok {
				continue
			}
			for _, m := range it.Methods.List {
				for _, n := range m.Names { // an embedded interface has none of its own
					names = append(names, typ.Name+"."+n.Name)
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

func TestExportedNames(t *testing.T) {
	names := exportedNames(t)
	if len(names) > maxExportedNames {
		t.Errorf("the package exports %d names beside struct fields, more than %d:\n%s", len(names), maxExportedNames, strings.Join(names, "\n"))
	}
	t.Logf("%d exported names: %s", len(names), strings.Join(names, " "))
}

// Every Go file of the repository keeps to one concern: no more than 500
// lines, its tests, their scaffolding, the examples and the benchmarks
// alike. The root package's
// own code is the public faces, the Limiter, the doors and the headers,
// and the one store in front of a store, lease.go, which speaks the
// limiter's own requests and so lives beside them (its blocks live under
// internal/): 5,500 lines until leases, 5,800 since, 6,150 since the
// fallback counts Wait's turns and charges the store what it admitted
// (their tables are under internal/: turns, owed), 6,175 since a store
// declares its features and the limiter checks each option against them
// (features.go; the Counter adapter lost its own checks to it), 6,210
// since a request the store refuses spends what its tenant's block took
// in meanwhile (lease.go), 6,285 since the three middlewares run one
// sequence, Middleware, that other modules build on (middleware.go), and
// 6,080 since the seam's types live in a package of their own, store, as
// database/sql/driver's do, and 6,094 since a Metrics hands each round
// trip to a histogram of another library (Metrics.OnRoundTrip), and
// 6,170 since Limiter.GiveBack gives back without a Decision (giveback.go).
func TestFileSizes(t *testing.T) {
	const maxLines, maxRoot = 500, 6170
	root := 0
	err := filepath.WalkDir(".", func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (strings.HasPrefix(e.Name(), ".") && path != "." || e.Name() == "testdata") {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := strings.Count(string(b), "\n")
		if n > maxLines {
			t.Errorf("%s has %d lines, more than %d: two concerns, or more", path, n, maxLines)
		}
		if filepath.Dir(path) == "." && !strings.HasSuffix(path, "_test.go") {
			root += n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if root > maxRoot {
		t.Errorf("the root package's code is %d lines, more than %d: what users never name belongs under internal/", root, maxRoot)
	}
}

// No package of the library under internal/ imports this one, or a public
// package other than store: the compiler refuses the cycle for those this
// package imports, and this test holds the others to it. The store
// package is the leaf both sides import, and imports only the standard
// library. The test scaffolding under internal/testkit drives the public
// API, as any test of the doors does.
func TestInternalPackagesDoNotImportTheRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Deps " "}}`, "./internal/...", "./store").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const root = "github.com/gatewaykit/ratelimit"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, ": ")
		if strings.HasPrefix(pkg, root+"/internal/testkit/") {
			continue
		}
		for _, d := range strings.Fields(deps) {
			first, _, _ := strings.Cut(d, "/")
			switch {
			case pkg == root+"/store" && strings.Contains(first, "."):
				t.Errorf("%s imports %s: it imports the standard library only", pkg, d)
			case d == root+"/store" || strings.HasPrefix(d, root+"/internal/"):
			case d == root || strings.HasPrefix(d, root+"/"):
				t.Errorf("%s imports %s", pkg, d)
			}
		}
	}
}
