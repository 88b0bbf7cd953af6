package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jingwei/jingwei/stream/streamtest"
)

// everythingServer returns the npm package @modelcontextprotocol/server-everything's
// binary (JINGWEI_MCP_EVERYTHING, installed by .ci/run): in CI a missing
// one fails the test.
func everythingServer(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("JINGWEI_MCP_EVERYTHING")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("JINGWEI_MCP_EVERYTHING is not set: .ci/run installs @modelcontextprotocol/server-everything with npm")
		}
		t.Skip("JINGWEI_MCP_EVERYTHING not set (npm install @modelcontextprotocol/server-everything; see .ci/run)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("JINGWEI_MCP_EVERYTHING: %v", err)
	}
	return bin
}

// TestMCPEverything: a third-party MCP server from npm is imported with
// 'jingwei tools import', run by 'jingwei serve --tools' and called through
// 'jingwei mcp' by the Go SDK's MCP client: tools/list shows the host's
// contract (echo declared read_only, the rest unknown as imported), and
// tools/call answers through the session log.
func TestMCPEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	everything := everythingServer(t)
	bin := buildJingwei(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	dir := t.TempDir()
	file := filepath.Join(dir, "tools.yaml")
	procs := &processes{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(procs.killAll)
	imp := procs.start("import", "tools", "import", "--mcp", everything+" stdio", "--name", "everything", "--out", file, "--timeout", "60s")
	<-imp.done
	if code := imp.cmd.ProcessState.ExitCode(); code != 0 {
		b, _ := os.ReadFile(imp.log)
		t.Fatalf("tools import: exit %d\n%s", code, b)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The host declares echo read-only; everything else stays unknown.
	doc := regexp.MustCompile(`(tool: "echo"\}\n)    # contract: [^\n]*\n`).ReplaceAllString(string(b), "${1}    contract: {effect: read_only, revision: echo-v1}\n")
	if doc == string(b) {
		t.Fatalf("no echo tool in the skeleton:\n%s", b)
	}
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}

	srv := startServe(t, bin, "--lease-ttl", pipelineLeaseTTL, "--tools", file)
	gw := procs.start("mcp", "mcp", "--tools", file, "--listen", "127.0.0.1:0", "--server", srv.url, "--auth", srv.auth())
	var endpoint string
	streamtest.Eventually(t, waitLimit, "jingwei mcp listening", func() bool {
		b, _ := os.ReadFile(gw.log)
		if m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(string(b)); m != nil {
			endpoint = m[1]
		}
		return endpoint != ""
	})

	c := mcp.NewClient(&mcp.Implementation{Name: "sdk-client", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range list.Tools {
		byName[tl.Name] = tl
	}
	echo, sum := byName["echo"], byName["get-sum"]
	if echo == nil || sum == nil {
		t.Fatalf("tools/list: %d tools, no echo or get-sum", len(list.Tools))
	}
	if ct, _ := echo.Meta["io.jingwei/contract"].(map[string]any); ct["effect"] != "read_only" || !echo.Annotations.ReadOnlyHint {
		t.Fatalf("echo listed as %+v", echo)
	}
	// get-sum: the server says read-only; imported, it is unknown, and so
	// it is listed.
	if ct, _ := sum.Meta["io.jingwei/contract"].(map[string]any); ct["effect"] != "unknown" || sum.Annotations.ReadOnlyHint {
		t.Fatalf("get-sum listed as %+v", sum)
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello through jingwei"},
		Meta: mcp.Meta{"io.jingwei/session": "everything-1", "io.jingwei/request-id": "echo-1"}})
	if err != nil {
		t.Fatal(err)
	}
	var txt strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			txt.WriteString(tc.Text)
		}
	}
	if res.IsError || !strings.Contains(txt.String(), "hello through jingwei") || res.Meta["io.jingwei/call-id"] == nil {
		t.Fatalf("echo: isError %v %q %v", res.IsError, txt.String(), res.Meta)
	}
	res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "get-sum", Arguments: map[string]any{"a": 2, "b": 3}})
	if err != nil {
		t.Fatal(err)
	}
	txt.Reset()
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			txt.WriteString(tc.Text)
		}
	}
	if res.IsError || !strings.Contains(txt.String(), "5") {
		t.Fatalf("get-sum: isError %v %q", res.IsError, txt.String())
	}

	// The same through 'jingwei mcp --stdio', started by the client.
	cmd := exec.Command(bin, "mcp", "--stdio", "--tools", file, "--server", srv.url, "--auth", srv.auth(), "--log-level", "warn")
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "over stdio"}})
	if err != nil {
		t.Fatal(err)
	}
	txt.Reset()
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			txt.WriteString(tc.Text)
		}
	}
	if res.IsError || !strings.Contains(txt.String(), "over stdio") {
		t.Fatalf("echo over stdio: isError %v %q", res.IsError, txt.String())
	}
}
