// Package buildinfo says which jingwei a binary is: the module version or
// the commit Go stamped into it, the wire schema version and the Go
// toolchain (jingwei version).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// SchemaVersion is the "v" every jingwei message carries
// (docs/protocol.md §5).
const SchemaVersion = 1

// Info is what `jingwei version --json` prints.
type Info struct {
	Version  string `json:"version"`
	Module   string `json:"module"`
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Schema   int    `json:"schema"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

// Read returns the running binary's Info. The version is the module's (a
// `go install …@version` build) or, for a build from a checkout, the
// commit Go stamped into the binary (12 hex digits, "-dirty" when the
// tree was modified); "(devel)" when neither is known (go run,
// -buildvcs=false).
func Read() Info {
	v := Info{Version: "(devel)", Module: "github.com/jingwei/jingwei", Schema: SchemaVersion, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
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

// String is the one line jingwei version prints:
//
//	jingwei v0.0.0-… (module github.com/jingwei/jingwei, schema v1, go1.26.8 linux/amd64)
func (v Info) String() string {
	return fmt.Sprintf("jingwei %s (module %s, schema v%d, %s %s/%s)", v.Version, v.Module, v.Schema, v.Go, v.OS, v.Arch)
}
