// Package toolsmcp serves jingwei's example tools (package tools) as an MCP
// server ('jingwei tools serve-examples'): each tools/call runs the tool's
// body with the call's fencing token and operation key from _meta
// (mcptool.RequestFromMeta), so the tools keep their promises — the
// idempotent orders.create deduplicates on the key, both fence their
// writes — behind an MCP backend exactly as when compiled into a worker.
// 'jingwei chaos --tools' runs its workload through it.
package toolsmcp

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/mcptool"
)

// Server returns an MCP server of tl's tools.
func Server(tl *tools.Tools) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "jingwei-examples", Version: "1"}, nil)
	for _, t := range tl.List() {
		in := any(json.RawMessage(`{"type":"object"}`))
		if len(t.InputSchema) > 0 {
			in = json.RawMessage(t.InputSchema)
		}
		s.AddTool(&mcp.Tool{Name: t.Metadata.Name, Description: t.Metadata.Description, InputSchema: in}, handler(t))
	}
	return s
}

func handler(t worker.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		br, err := mcptool.RequestFromMeta(req.Params.Meta, t.Metadata.Name, req.Params.Arguments)
		if err != nil {
			return errorResult(err), nil
		}
		if br.Operation.Contract.Revision == "" {
			br.Operation.Contract = t.Metadata.Contract
		}
		out, err := t.Body(worker.WithFence(ctx, br.Fence), br)
		if err != nil {
			return errorResult(err), nil
		}
		res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}}
		if len(out) > 0 {
			res.StructuredContent = json.RawMessage(out)
		}
		return res, nil
	}
}

func errorResult(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
}
