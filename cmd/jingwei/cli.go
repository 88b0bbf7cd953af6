package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/flaghelp"
)

// Exit statuses (docs/protocol.md §13, "Exit statuses of the CLI").
const (
	exitOK      = 0
	exitFailure = 1 // an unexpected failure (I/O, an internal answer)
	exitUsage   = 2
	exitRefused = 3 // refused, with the error code in the JSON on stdout
	// exitUnreachable: the server did not accept the connection within
	// 2 s ({"error":{"code":"unreachable"}} on stdout).
	exitUnreachable = 4
)

// command is one subcommand. Each lives in its own file and registers itself
// in init.
type command struct {
	name    string
	summary string
	// run parses args (after the command name) and returns the exit status.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			c, ok := commands[args[1]]
			if !ok {
				fmt.Fprintf(stderr, "jingwei: unknown command %q\n\n", args[1])
				usage(stderr)
				return exitUsage
			}
			return c.run(ctx, []string{"--help"}, stdout, stderr)
		}
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "jingwei: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "jingwei makes AI-agent tool calls safe to recover after crashes.")
	fmt.Fprintln(w, "\nUsage: jingwei <command> [flags]   (jingwei help <command> for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

// newFlags returns a FlagSet that prints its usage (with the command's
// summary and description) to stderr and returns errors instead of exiting.
func newFlags(name, summary, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: jingwei %s [flags]\n\n%s\n", name, summary)
		if description != "" {
			fmt.Fprintf(stderr, "\n%s\n", strings.TrimSpace(description))
		}
		fmt.Fprintln(stderr, "\nFlags:")
		flaghelp.Write(stderr, fs)
	}
	return fs
}

// parseFlags parses args; it returns (status, false) when the command must
// stop: exitOK for --help, exitUsage for a bad flag or stray arguments.
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "jingwei %s: unexpected arguments: %s\n", fs.Name(), strings.Join(fs.Args(), " "))
		return exitUsage, false
	}
	return 0, true
}

// usageError prints a usage problem and returns exitUsage.
func usageError(stderr io.Writer, name, format string, args ...any) int {
	fmt.Fprintf(stderr, "jingwei %s: %s (see jingwei help %s)\n", name, fmt.Sprintf(format, args...), name)
	return exitUsage
}

// writeJSON prints v as one JSON object on its own line.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeError prints err as the error body on stdout and returns its exit
// status: exitRefused for a coded refusal, exitFailure otherwise (code
// "internal").
func writeError(stdout io.Writer, err error) int { return printErrorBody(stdout, err, nil) }
