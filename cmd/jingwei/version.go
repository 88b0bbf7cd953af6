package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/buildinfo"
)

func init() {
	register(command{name: "version", summary: "print jingwei's version, the wire schema version and the Go toolchain", run: runVersion})
}

// versionInfo is what `jingwei version --json` prints.
type versionInfo = buildinfo.Info

// runVersion prints one line (buildinfo.Info.String), or one JSON object
// with --json.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", "print jingwei's version, the wire schema version and the Go toolchain", "", stderr)
	asJSON := fs.Bool("json", false, "print the version as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	v := buildinfo.Read()
	if *asJSON {
		_ = writeJSON(stdout, v)
		return exitOK
	}
	fmt.Fprintln(stdout, v)
	return exitOK
}
