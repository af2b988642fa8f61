package otellimit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// instrumentNames returns the package's instrument names: the values of its
// string constants that begin with "quotagate.", read from its source.
func instrumentNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				for _, v := range spec.(*ast.ValueSpec).Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					if s, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(s, "quotagate.") {
						names = append(names, s)
					}
				}
			}
		}
	}
	return names
}

// The package documentation and README.md list every instrument the
// package declares, each with its attributes ("name{...}").
func TestDocsListEveryInstrument(t *testing.T) {
	t.Parallel()
	names := instrumentNames(t)
	if len(names) < 10 {
		t.Fatalf("found %d instrument names in the source, want the whole set: %q", len(names), names)
	}
	pkgDoc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if os.IsNotExist(err) {
		t.Skipf("SKIPPED: ../../README.md not found: this test checks the repository's README and needs a checkout of the whole repository")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(string(pkgDoc), "//\t"+n+"{") {
			t.Errorf("the package documentation (doc.go) does not list %s{...}", n)
		}
		if !strings.Contains(string(readme), "`"+n+"{") {
			t.Errorf("README.md's OpenTelemetry section does not list `%s{...}`", n)
		}
	}
}
