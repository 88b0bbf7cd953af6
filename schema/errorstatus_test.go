package schema_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/jingwei/jingwei/schema"
)

// TestEveryCodeHasAStatus: every Code constant maps to a numeric status
// for the micro error header, one of the HTTP-like classes the protocol
// document lists; internal alone is 500 by default.
func TestEveryCodeHasAStatus(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[int]bool{400: true, 403: true, 404: true, 409: true, 413: true, 429: true, 500: true, 503: true, 504: true}
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
		if s := schema.Code(code).Status(); !allowed[s] {
			t.Errorf("code %q: status %d", code, s)
		}
		return true
	})
	if n < 20 {
		t.Fatalf("found only %d codes", n)
	}
	for code, want := range map[schema.Code]string{schema.CodeBadRequest: "400", schema.CodeForbidden: "403", schema.CodeUnknownCall: "404", schema.CodeNeedsReview: "409", schema.CodeBusy: "429", schema.CodeInternal: "500", schema.CodeLog: "503", "no_such_code": "500"} {
		if got := code.StatusText(); got != want {
			t.Errorf("%s: %s, want %s", code, got, want)
		}
	}
}
