package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/toolcatalog"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/tools/toolsmcp"
	"github.com/jingwei/jingwei/worker/catalog"
)

func init() {
	register(command{name: "tools", summary: "check a tool catalog against its MCP servers, import an MCP server's tools as a catalog skeleton, or serve the example tools over MCP", run: runTools})
	commandRole["tools"] = access.RoleWorker // serve-examples writes the example tools' records
}

const toolsHelp = `  jingwei tools check FILE [--timeout 30s]
  jingwei tools import --mcp CMD|URL [--name NAME] [--out FILE] [--timeout 30s]
  jingwei tools serve-examples [--server URL] [--auth DIR]

check connects to every MCP server of the catalog FILE (docs/catalog.md) and
lists each tool with its backend, its host-owned contract and the server's
hints (readOnlyHint, idempotentHint, destructiveHint). It warns where a tool
no longer exists on its server, a server cannot be reached, a tool has no
contract (unknown), or the hints disagree with the contract (declared
idempotent, the server says destructive and not idempotent). The hints never
decide anything: the contract does.

import connects to one MCP server — a URL (streamable HTTP) or a command line
(stdio; split at spaces) — and writes a catalog skeleton listing all its
tools, every one unknown, with the server's hints and descriptions as
comments: declare each contract before you rely on recovery.

serve-examples serves the example tools (orders.create, payments.charge,
catalog.lookup) as an MCP server on stdin/stdout, connected to NATS as the
worker role (--server, --auth, or the environment: NATS_URL, JINGWEI_AUTH).
Each tools/call runs the tool with the fencing token and operation key from
_meta, so the tools keep their promises behind an MCP backend; 'jingwei
chaos --tools' runs its workload through it (docs/catalog.md).

Exit status: 0 no warnings (check) or the skeleton written (import);
1 a server could not be reached (import) or the output not written;
2 usage; 3 check found warnings.`

func runTools(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("tools", "Check a catalog, or import an MCP server's tools.", toolsHelp, stderr)
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the servers")
	mcpSrc := fs.String("mcp", "", "import: the MCP server, a URL or a command line")
	name := fs.String("name", "server", "import: the server's name in the catalog")
	out := fs.String("out", "", "import: write the skeleton to this file (default stdout)")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if st, ok := parseFlags(fs, args); !ok {
			return st
		}
		return usageError(stderr, "tools", "want 'check FILE' or 'import --mcp CMD|URL'")
	}
	sub, rest := args[0], args[1:]
	if sub == "serve-examples" {
		return serveExamples(ctx, rest, stderr)
	}
	var file string
	if sub == "check" && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		file, rest = rest[0], rest[1:]
	}
	if st, ok := parseFlags(fs, rest); !ok {
		return st
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch sub {
	case "check":
		if file == "" {
			return usageError(stderr, "tools", "check: want the catalog FILE")
		}
		cat, err := catalog.Load(file)
		if err != nil {
			return usageError(stderr, "tools", "%v", err)
		}
		set := catalog.Open(cat, zerolog.Nop())
		defer set.Close()
		warnings := toolcatalog.WriteCheck(stdout, set.Check(ctx))
		if warnings > 0 {
			return exitRefused
		}
		return exitOK
	case "import":
		if *mcpSrc == "" {
			return usageError(stderr, "tools", "import: --mcp CMD|URL is required")
		}
		b, err := catalog.Skeleton(ctx, *name, toolcatalog.Server(*mcpSrc), *mcpSrc)
		if err != nil {
			fmt.Fprintf(stderr, "jingwei tools import: %v\n", err)
			return exitFailure
		}
		if *out == "" {
			_, _ = stdout.Write(b)
			return exitOK
		}
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			fmt.Fprintf(stderr, "jingwei tools import: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	return usageError(stderr, "tools", "unknown subcommand %q: want check or import", sub)
}

// serveExamples runs 'jingwei tools serve-examples'.
func serveExamples(ctx context.Context, args []string, stderr io.Writer) int {
	fs := newFlags("tools", "Serve the example tools over MCP (stdio).", toolsHelp, stderr)
	var (
		nf natsFlags
		lf logFlags
	)
	nf.register(fs)
	lf.register(fs)
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "tools", "%v", err)
	}
	nc, err := nf.connect(ctx, "tools", log)
	if err != nil {
		fmt.Fprintf(stderr, "jingwei tools serve-examples: %v\n", err)
		return exitFailure
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintf(stderr, "jingwei tools serve-examples: %v\n", err)
		return exitFailure
	}
	tl, err := tools.New(ctx, tools.Config{JS: js, Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "jingwei tools serve-examples: %v\n", err)
		return exitFailure
	}
	if err := toolsmcp.Server(tl).Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "jingwei tools serve-examples: %v\n", err)
		return exitFailure
	}
	return exitOK
}
