// Package flaghelp writes a command's flags the way jingwei's help texts
// and the README spell them: two dashes, the type, the usage and the
// default when it is not the zero value.
package flaghelp

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Write writes fs's flags the way the text and the README spell
// them, with two dashes (`--json`; the flag package accepts one or two),
// each with its type, its usage and its default when that is not the zero
// value. flag.PrintDefaults writes `-json`, which the documentation never
// says.
func Write(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !isZeroDefault(f) && !strings.Contains(usage, "(default ") {
			if _, ok := f.Value.(interface{ String() string }); ok && isStringFlag(f) {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(w, " (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w)
	})
}

// isZeroDefault reports whether f's default is its type's zero value (the
// flag package's own rule for leaving the default out).
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

// isStringFlag reports whether f holds a plain string (its default is
// quoted, as flag.PrintDefaults does).
func isStringFlag(f *flag.Flag) bool {
	name, _ := flag.UnquoteUsage(f)
	return name == "string"
}
