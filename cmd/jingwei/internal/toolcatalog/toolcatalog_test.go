package toolcatalog

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/worker/catalog"
)

func TestReadTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		f := filepath.Join(dir, "tokens")
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	got, err := ReadTokens(write("# agents\n\n0123456789abcdef alice\n  fedcba9876543210   bob  \n"))
	if err != nil || len(got) != 2 || got["0123456789abcdef"] != "alice" || got["fedcba9876543210"] != "bob" {
		t.Errorf("ReadTokens = %v, %v", got, err)
	}
	for body, want := range map[string]string{
		"short alice\n":              ":1: want 'TOKEN AGENT'",
		"0123456789abcdef\n":         ":1: want 'TOKEN AGENT'",
		"# nothing but comments\n\n": "no tokens",
	} {
		if _, err := ReadTokens(write(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

func TestServer(t *testing.T) {
	if got := Server("https://mcp.example/x"); got.URL != "https://mcp.example/x" || got.Command != "" {
		t.Errorf("URL: %+v", got)
	}
	if got := Server("npx -y server --flag"); got.Command != "npx" || !reflect.DeepEqual(got.Args, []string{"-y", "server", "--flag"}) {
		t.Errorf("command: %+v", got)
	}
}

func TestWriteCheckCountsWarnings(t *testing.T) {
	var b bytes.Buffer
	n := WriteCheck(&b, []catalog.Report{{Tool: "a", Backend: "http POST x", Warnings: []string{"w1", "w2"}}, {Tool: "b", Backend: "builtin"}})
	if n != 2 || !strings.Contains(b.String(), "warning: a: w2\n") || !strings.HasPrefix(b.String(), "TOOL") {
		t.Errorf("WriteCheck = %d:\n%s", n, b.String())
	}
}
