package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/toolcatalog"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/worker/mcpserver"
	"github.com/jingwei/jingwei/worker/service"
)

func init() {
	register(command{name: "mcp", summary: "serve the deployment's tools to MCP clients (streamable HTTP on loopback, or --stdio); every call goes through jw.api.call", run: runMCP})
	commandRole["mcp"] = access.RoleAgent
}

const mcpHelp = `  jingwei mcp [--tools FILE] [--listen 127.0.0.1:8765] [--tokens FILE] [--stdio]
              [--call-timeout 2m] [--server URL] [--auth DIR]

Serves the deployment's tools to MCP clients (Claude, Cursor, agent
frameworks' MCP adapters): streamable HTTP on --listen at /mcp, or the MCP
stdio transport with --stdio (for a client that starts jingwei itself).
It connects to NATS as the agent role and nothing more: no review, approval
or plan powers.

tools/list: the tools of --tools FILE (the catalog the workers run,
docs/catalog.md; default: the example tools), with MCP annotations derived
from the host-owned contract — never from a backend's hints — and the
contract in _meta (io.jingwei/contract).

tools/call: a tool request on jw.api.call, in the session the client names
in _meta (io.jingwei/session) or else one bound to the MCP session and the
agent; its request id is _meta io.jingwei/request-id, else derived from the
MCP session and the JSON-RPC id, so a client that re-sends after a lost
response gets the stored result and the tool runs once. An ok result is the
output as text (and structuredContent for a JSON object); anything else —
a refusal, a failure, a timeout, a call still waiting for its result or an
approval — is a tool error whose text starts with 'jingwei <code>:' and says
what to do, with the code in _meta (io.jingwei/code).

--tokens FILE: one 'TOKEN AGENT' per line ('#' comments): every HTTP request
needs Authorization: Bearer TOKEN, and its default sessions are the agent's.
Without --tokens only a loopback --listen is allowed.

Exit status: 0 stopped by a signal; 1 the server or the listener failed;
2 usage.`

func runMCP(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("mcp", "Serve the deployment's tools to MCP clients.", mcpHelp, stderr)
	var (
		nf          natsFlags
		lf          logFlags
		toolsFile   string
		listen      string
		tokensFile  string
		stdio       bool
		callTimeout time.Duration
	)
	nf.register(fs)
	lf.register(fs)
	fs.StringVar(&toolsFile, "tools", envOr("JINGWEI_TOOLS", ""), "tool catalog file (docs/catalog.md) whose tools are listed (default: the example tools; env JINGWEI_TOOLS)")
	fs.StringVar(&listen, "listen", "127.0.0.1:8765", "address of the streamable-HTTP endpoint (/mcp); loopback only without --tokens")
	fs.StringVar(&tokensFile, "tokens", envOr("JINGWEI_MCP_TOKENS", ""), "file of bearer tokens, 'TOKEN AGENT' per line (env JINGWEI_MCP_TOKENS)")
	fs.BoolVar(&stdio, "stdio", false, "serve one client on stdin/stdout instead of HTTP")
	fs.DurationVar(&callTimeout, "call-timeout", 2*time.Minute, "how long one tools/call waits for jw.api.call's answer")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if callTimeout <= 0 {
		return usageError(stderr, "mcp", "--call-timeout must be positive")
	}
	var tokens mcpserver.Tokens
	if tokensFile != "" {
		var err error
		if tokens, err = toolcatalog.ReadTokens(tokensFile); err != nil {
			return usageError(stderr, "mcp", "--tokens %v", err)
		}
	}
	if !stdio && tokens == nil && !loopback(listen) {
		return usageError(stderr, "mcp", "--listen %s is not a loopback address: give --tokens so that clients authenticate", listen)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "mcp", "%v", err)
	}
	list, err := toolcatalog.Tools(ctx, toolsFile, log)
	if err != nil {
		return usageError(stderr, "mcp", "--tools %v", err)
	}
	nc, err := nf.connect(ctx, "mcp", log)
	if err != nil {
		fmt.Fprintf(stderr, "jingwei mcp: %v\n", err)
		return exitFailure
	}
	defer nc.Close()
	caller := service.NewClient(nc, service.ClientConfig{Prefix: nf.prefix, Timeout: callTimeout})
	srv := mcpserver.New(mcpserver.Config{Caller: caller, Tools: list, Logger: log})
	if stdio {
		if err := srv.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			fmt.Fprintf(stderr, "jingwei mcp: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "jingwei mcp: %v\n", err)
		return exitFailure
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpserver.HTTP(srv, tokens))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "jingwei mcp: listening on http://%s/mcp (%d tools)\n", ln.Addr(), len(list))
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "jingwei mcp: %v\n", err)
		return exitFailure
	}
	return exitOK
}
