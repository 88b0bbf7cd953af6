package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/jingwei/jingwei/schema"
)

func init() {
	register(command{name: "export", summary: "write a session's history from the server as JSON Lines", run: runExport})
}

const exportHelp = `  jingwei export --session S [--server URL] [--out FILE]

Loads the session's log (jw.events.<session>) from the server and writes it
as JSON Lines, one event per line with its seq: the format of the
conformance fixtures, which 'jingwei inspect --history' and 'jingwei plan
--history' read. Reading does not fence the session: a writer that is still
running may append after the export.

Exit status:
  0  success (an unknown session exports as empty)
  1  unexpected failure: the server is unreachable, jingwei's streams do not
     exist there, a write error; {"error":{"code":"internal",…}} on stdout
     unless --out is stdout
  2  usage: a missing or bad flag, an invalid session id
  3  refused: history_too_large or corrupt_history;
     {"error":{"code":…,"message":…}} on stdout`

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("export", "Write a session's history from the server as JSON Lines.", exportHelp, stderr)
	var nf natsFlags
	nf.register(fs)
	session := fs.String("session", "", "session id (required)")
	out := fs.String("out", "", "output file (default stdout); written whole or not at all")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if *session == "" {
		return usageError(stderr, "export", "--session is required")
	}
	if !schema.ValidSession(*session) {
		return usageError(stderr, "export", "invalid session id %q (1-128 bytes of [A-Za-z0-9_-])", *session)
	}
	events, err := nf.loadSession(ctx, "export", *session)
	if err != nil {
		if *out == "" && schema.CodeOf(err) == "" {
			fmt.Fprintf(stderr, "jingwei export: %v\n", err)
			return exitFailure
		}
		return writeError(stdout, err)
	}
	if *out == "" {
		if err := schema.WriteHistory(stdout, events); err != nil {
			fmt.Fprintf(stderr, "jingwei export: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	if err := writeFileAtomic(*out, events); err != nil {
		fmt.Fprintf(stderr, "jingwei export: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stderr, "jingwei export: %d events of session %s written to %s\n", len(events), *session, *out)
	return exitOK
}

// writeFileAtomic writes the history to a temporary file next to name and
// renames it into place, so a failed export leaves no half-written file.
func writeFileAtomic(name string, events []schema.Event) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".export-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := schema.WriteHistory(f, events); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}
