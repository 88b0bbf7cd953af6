package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/worker/catalog"
	"github.com/jingwei/jingwei/worker/mcptool/mcptest"
)

func mcpTestServer(t *testing.T) string {
	t.Helper()
	srv := mcptest.NewServer(mcptest.Options{})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.Server }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// import writes a skeleton in which every tool is unknown, with the
// server's hints as comments; it loads as a catalog.
func TestToolsImportWritesAnUnknownSkeleton(t *testing.T) {
	url := mcpTestServer(t)
	out := filepath.Join(t.TempDir(), "tools.yaml")
	if st, _, errOut := runCLI("tools", "import", "--mcp", url, "--name", "ledger", "--out", out); st != exitOK {
		t.Fatalf("import: %d %s", st, errOut)
	}
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), "# server hints: readOnlyHint=true idempotentHint=true destructiveHint=false") {
		t.Fatalf("no hints as comments:\n%s", b)
	}
	cat, err := catalog.Parse(b)
	if err != nil {
		t.Fatalf("skeleton does not load: %v\n%s", err, b)
	}
	if len(cat.Tools) != 7 {
		t.Fatalf("%d tools", len(cat.Tools))
	}
	for _, e := range cat.Tools {
		if e.EffectContract().Effect != effect.Unknown || e.MCP == nil || e.MCP.Server != "ledger" {
			t.Errorf("%s: %+v", e.Name, e)
		}
	}
}

// check lists contracts beside the hints and warns of a lying or changed
// server: declared idempotent but destructive, a tool gone, a server down.
func TestToolsCheckWarns(t *testing.T) {
	url := mcpTestServer(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	file := filepath.Join(t.TempDir(), "tools.yaml")
	doc := `version: 1
servers:
  ledger: {url: "` + url + `"}
  gone: {url: "` + dead.URL + `"}
tools:
  - name: put
    mcp: {server: ledger}
    contract: {effect: idempotent, revision: v1}
  - name: charge
    mcp: {server: ledger}
    contract: {effect: idempotent, revision: v1}
  - name: vanished
    mcp: {server: ledger}
    contract: {effect: read_only, revision: v1}
  - name: elsewhere
    mcp: {server: gone, tool: x}
    contract: {effect: read_only, revision: v1}
`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	st, out, errOut := runCLI("tools", "check", file, "--timeout", "10s")
	if st != exitRefused {
		t.Fatalf("check: %d\n%s%s", st, out, errOut)
	}
	for _, want := range []string{
		"idempotent@v1  readOnlyHint=false idempotentHint=true destructiveHint=false",
		"warning: charge: declared idempotent, but the server says the tool is destructive and not idempotent",
		`warning: vanished: the server ledger has no tool "vanished"`,
		"warning: elsewhere: server unreachable",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "warning: put:") {
		t.Errorf("put warned:\n%s", out)
	}
}
