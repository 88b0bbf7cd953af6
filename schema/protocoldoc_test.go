package schema_test

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

// TestProtocolDocListsEveryCode keeps the protocol document's table of
// error codes (docs/protocol.md §15) complete: every Code constant of this
// package must be named there.
func TestProtocolDocListsEveryCode(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(doc), "## 15. Error codes")
	if start < 0 {
		t.Fatal("docs/protocol.md has no section 15. Error codes")
	}
	table := string(doc[start:])
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok || len(vs.Values) != 1 {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
			return true
		}
		lit, ok := vs.Values[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		code, _ := strconv.Unquote(lit.Value)
		n++
		if !strings.Contains(table, "`"+code+"`") {
			t.Errorf("code %q (%s) is not in docs/protocol.md §15", code, vs.Names[0].Name)
		}
		return true
	})
	if n < 20 {
		t.Fatalf("found only %d codes in errors.go", n)
	}
}
