package ratelimit

import (
	"go/ast"
	"go/doc"
	"go/printer"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// What godoc shows of an exported name, its doc and its declaration, names
// nothing a reader cannot look up: no unexported identifier of the
// package. Only identifiers written as code (camelCase, such as
// numCauses) are looked for: plain words (take, clock) are also English.
func TestGodocNamesNoUnexportedIdentifier(t *testing.T) {
	fset, files := parsePackage(t)
	unexported := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			for _, id := range declared(d) {
				if !id.IsExported() && strings.ContainsFunc(id.Name, unicode.IsUpper) {
					unexported[id.Name] = true
				}
			}
		}
	}
	// doc.New keeps only what godoc shows: exported declarations, with
	// their unexported fields and methods filtered out.
	d, err := doc.NewFromFiles(fset, files, "github.com/gatewaykit/ratelimit")
	if err != nil {
		t.Fatal(err)
	}
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	check := func(what, text string) {
		for _, w := range word.FindAllString(text, -1) {
			if unexported[w] {
				t.Errorf("%s names the unexported %s", what, w)
			}
		}
	}
	source := func(node any) string {
		var b strings.Builder
		_ = printer.Fprint(&b, fset, node)
		return b.String()
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			check("the doc of "+strings.Join(v.Names, ", "), v.Doc)
			check("the declaration of "+strings.Join(v.Names, ", "), source(v.Decl))
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			check("the doc of "+f.Name, f.Doc)
			check("the declaration of "+f.Name, source(f.Decl.Type))
		}
	}
	check("the package doc", d.Doc)
	values(d.Consts)
	values(d.Vars)
	funcs(d.Funcs)
	for _, typ := range d.Types {
		check("the doc of "+typ.Name, typ.Doc)
		check("the declaration of "+typ.Name, source(typ.Decl))
		values(typ.Consts)
		values(typ.Vars)
		funcs(typ.Funcs)
		funcs(typ.Methods)
	}
}

// declared returns the names that the top-level declaration d declares.
func declared(d ast.Decl) []*ast.Ident {
	switch d := d.(type) {
	case *ast.FuncDecl:
		return []*ast.Ident{d.Name}
	case *ast.GenDecl:
		var ids []*ast.Ident
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				ids = append(ids, s.Name)
			case *ast.ValueSpec:
				ids = append(ids, s.Names...)
			}
		}
		return ids
	}
	return nil
}
