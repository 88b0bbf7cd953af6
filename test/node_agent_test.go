package test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNodeAgentExample runs docs/examples/node-agent/agent.js — an agent
// written from docs/protocol.md with the nats npm package — against a
// fresh `jingwei serve`: with the agent role's key it calls a tool and
// prints the tool.result; an unknown tool is a refusal (exit 3,
// unknown_tool); another role's key is permission_denied. It needs node
// and the package: JINGWEI_NODE_AGENT names the node_modules directory
// that holds nats (.ci/run installs it); without it the test is skipped,
// with it every failure counts.
func TestNodeAgentExample(t *testing.T) {
	modules := os.Getenv("JINGWEI_NODE_AGENT")
	if modules == "" {
		t.Skip("JINGWEI_NODE_AGENT (the node_modules directory holding the nats package) is not set")
	}
	if _, err := os.Stat(filepath.Join(modules, "nats", "package.json")); err != nil {
		t.Fatalf("JINGWEI_NODE_AGENT=%s holds no nats package: %v", modules, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("..", "docs", "examples", "node-agent", "agent.js"))
	if err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, jingweiBinary(t))
	run := func(key string, args ...string) cliResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append([]string{script, "--nkey", filepath.Join(srv.auth(), key)}, args...)...)
		cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "NATS_URL="+srv.url)
		out, err := cmd.Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			out = append(out, ee.Stderr...)
		} else if err != nil {
			t.Fatal(err)
		}
		return cliResult{code: code, stdout: string(out)}
	}

	r := run("agent.nk", "--session", "s-node", "--task", "t-1", "--tool", "catalog.lookup", "--args", `{"sku":"A-1"}`, "--request-id", "r-node-1")
	if r.code != 0 {
		t.Fatalf("node agent: exit %d: %s", r.code, r.stdout)
	}
	var ev struct {
		Session string `json:"session"`
		Type    string `json:"type"`
		Result  struct {
			CallID string          `json:"call_id"`
			Status string          `json:"status"`
			Output json.RawMessage `json:"output"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &ev); err != nil {
		t.Fatalf("node agent printed %q: %v", r.stdout, err)
	}
	if ev.Type != "tool.result" || ev.Session != "s-node" || ev.Result.Status != "ok" || !strings.Contains(string(ev.Result.Output), `"sku":"A-1"`) {
		t.Fatalf("node agent's answer: %s", r.stdout)
	}
	// The same request id again is answered from the log: the same call.
	again := run("agent.nk", "--session", "s-node", "--task", "t-1", "--tool", "catalog.lookup", "--args", `{"sku":"A-1"}`, "--request-id", "r-node-1")
	if again.code != 0 || !strings.Contains(again.stdout, ev.Result.CallID) {
		t.Fatalf("the same request again: exit %d: %s (want call %s)", again.code, again.stdout, ev.Result.CallID)
	}

	r = run("agent.nk", "--session", "s-node", "--tool", "orders.delete", "--args", `{}`)
	if r.code != 3 || r.errorCode() != "unknown_tool" {
		t.Fatalf("unknown tool: exit %d, code %q: %s", r.code, r.errorCode(), r.stdout)
	}
	r = run("reviewer.nk", "--session", "s-node", "--tool", "catalog.lookup", "--args", `{"sku":"A-1"}`, "--timeout", "5000")
	if r.code != 3 || r.errorCode() != "permission_denied" {
		t.Fatalf("with the reviewer's key: exit %d, code %q: %s", r.code, r.errorCode(), r.stdout)
	}
}
