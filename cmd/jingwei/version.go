package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register(command{name: "version", summary: "print jingwei's version, the wire schema version and the Go toolchain", run: runVersion})
}

// schemaVersion is the "v" every jingwei message carries (docs/protocol.md
// §5).
const schemaVersion = 1

// runVersion prints one line, or one JSON object with --json:
//
//	jingwei v0.0.0-… (module github.com/jingwei/jingwei, schema v1, go1.26.8 linux/amd64)
//
// The version is the module's (a `go install …@version` build) or, for a
// build from a checkout, the commit Go stamped into the binary; "(devel)"
// when neither is known (go run, -buildvcs=false).
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", "print jingwei's version, the wire schema version and the Go toolchain", "", stderr)
	asJSON := fs.Bool("json", false, "print the version as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	v := buildVersion()
	if *asJSON {
		_ = writeJSON(stdout, v)
		return exitOK
	}
	fmt.Fprintf(stdout, "jingwei %s (module %s, schema v%d, %s %s/%s)\n", v.Version, v.Module, v.Schema, v.Go, v.OS, v.Arch)
	return exitOK
}

// versionInfo is what `jingwei version --json` prints.
type versionInfo struct {
	Version  string `json:"version"`
	Module   string `json:"module"`
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Schema   int    `json:"schema"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: "(devel)", Module: "github.com/jingwei/jingwei", Schema: schemaVersion, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Path != "" {
		v.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if v.Version == "(devel)" && v.Revision != "" {
		v.Version = v.Revision[:min(12, len(v.Revision))]
		if v.Modified {
			v.Version += "-dirty"
		}
	}
	return v
}
