// Package toolcatalog is what the CLI does with a tool catalog
// (docs/catalog.md) outside a tool worker: check it and say what it
// found (jingwei tools check), name the MCP server a skeleton is imported
// from (jingwei tools import), and list its tools with the bearer tokens
// of the agents that may call them (jingwei mcp).
package toolcatalog

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/catalog"
	"github.com/jingwei/jingwei/worker/mcpserver"
)

// WriteCheck writes one row per tool of reports (its backend, its
// contract and, for an MCP tool, the server's hints), then one line per
// warning, and returns how many warnings there were.
func WriteCheck(w io.Writer, reports []catalog.Report) int {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tBACKEND\tCONTRACT\tSERVER HINTS")
	for _, r := range reports {
		hints := "-"
		if strings.HasPrefix(r.Backend, "mcp ") {
			hints = r.Hints.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Tool, r.Backend, r.Contract, hints)
	}
	_ = tw.Flush()
	warnings := 0
	for _, r := range reports {
		for _, msg := range r.Warnings {
			warnings++
			fmt.Fprintf(w, "warning: %s: %s\n", r.Tool, msg)
		}
	}
	return warnings
}

// Server names the MCP server of --mcp: an http(s) URL, or a command line
// split on spaces. src must not be empty.
func Server(src string) catalog.Server {
	var sv catalog.Server
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		sv.URL = src
	} else {
		f := strings.Fields(src)
		sv.Command, sv.Args = f[0], f[1:]
	}
	return sv
}

// Tools returns the tools (metadata and input schemas) of the catalog
// file, or the example tools' without one. MCP servers are asked for
// their input schemas once and closed.
func Tools(ctx context.Context, file string, log zerolog.Logger) ([]worker.Tool, error) {
	builtin := (&tools.Tools{}).List()
	if file == "" {
		return builtin, nil
	}
	cat, err := catalog.Load(file)
	if err != nil {
		return nil, err
	}
	set := catalog.Open(cat, log)
	defer set.Close()
	return set.Tools(ctx, builtin)
}

// ReadTokens reads a --tokens file: one 'TOKEN AGENT' per line, a token
// of at least 16 characters; blank lines and '#' comments are skipped. A
// file without tokens is an error.
func ReadTokens(file string) (mcpserver.Tokens, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := mcpserver.Tokens{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || len(fields[0]) < 16 {
			return nil, fmt.Errorf("%s:%d: want 'TOKEN AGENT', a token of at least 16 characters", file, n)
		}
		out[fields[0]] = fields[1]
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no tokens", file)
	}
	return out, sc.Err()
}
