package ratelimit

import (
	"go/ast"
	"go/doc"
	"go/printer"
	"go/token"
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

// A configuration field whose type is one of the package's enumerations
// (Algorithm, Calendar) names, in its doc or its line comment, every
// constant of that type, so that a reader of Options, Config, HTTPConfig,
// Plan or Quota learns every value it takes where it is set.
// (fiberv3.Config, in a module of its own, has no such field.)
func TestConfigFieldsNameEveryValue(t *testing.T) {
	_, files := parsePackage(t)
	consts := map[string][]string{} // a type's constants, by the type's name
	structs := map[string]*ast.StructType{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			typ := "" // in a block of iota, a spec without a type has the last one's
			for _, s := range g.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					switch {
					case s.Type != nil:
						typ = ""
						if id, ok := s.Type.(*ast.Ident); ok {
							typ = id.Name
						}
					case len(s.Values) > 0: // a constant of no named type
						typ = ""
					}
					if g.Tok == token.CONST && typ != "" {
						for _, n := range s.Names {
							if n.IsExported() {
								consts[typ] = append(consts[typ], n.Name)
							}
						}
					}
				case *ast.TypeSpec:
					if st, ok := s.Type.(*ast.StructType); ok {
						structs[s.Name.Name] = st
					}
				}
			}
		}
	}
	for _, typ := range []string{"Algorithm", "Calendar"} {
		if len(consts[typ]) < 3 {
			t.Fatalf("found the constants %v of %s: the test no longer reads the declarations right", consts[typ], typ)
		}
	}
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	checked := 0
	for _, name := range []string{"Options", "Config", "HTTPConfig", "Plan", "Quota"} {
		st := structs[name]
		if st == nil {
			t.Fatalf("no struct %s", name)
		}
		for _, field := range st.Fields.List {
			id, ok := field.Type.(*ast.Ident)
			if !ok || consts[id.Name] == nil {
				continue
			}
			checked++
			said := map[string]bool{}
			for _, w := range word.FindAllString(field.Doc.Text()+" "+field.Comment.Text(), -1) {
				said[w] = true
			}
			for _, c := range consts[id.Name] {
				if !said[c] {
					t.Errorf("%s.%s's doc does not name %s, a value of %s", name, field.Names[0].Name, c, id.Name)
				}
			}
		}
	}
	if checked < 3 { // Options.Algorithm, Config.Algorithm, Quota.Calendar
		t.Errorf("checked %d fields, want at least 3", checked)
	}
}
