package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/sessionlog"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

func init() {
	register(command{name: "export", summary: "write a session's history from the server as JSON Lines", run: runExport})
}

const exportHelp = `  jingwei export --session S [--server URL] [--out FILE] [--via auto|service|direct]

Loads the session's log (jw.events.<session>) from the server and writes it
as JSON Lines, one event per line with its seq: the format of the
conformance fixtures, which 'jingwei inspect --history' and 'jingwei plan
--history' read. Reading does not fence the session: a writer that is still
running may append after the export.

--via says how the log is read: service asks the recovery worker
(jw.api.history, a page at a time), which any role may, a tenant's agent
too (--nkey or --creds of its key: its own sessions only); direct reads
the stream itself (operators: host, admin); auto (the default) asks the
service and reads directly when no recovery worker answers. Both read up
to the last event the stream leader holds when the export starts.

Exit status:
  0  success
  1  unexpected failure: jingwei's streams do not exist there, a write
     error; {"error":{"code":"internal",…}} on stdout unless --out is stdout
  2  usage: a missing or bad flag, an invalid session id
  3  refused: unknown_session (no event on the session's log: nothing is
     written), history_too_large, corrupt_history, or (through the service)
     forbidden: a tenant's agent asked for another tenant's session;
     {"error":{"code":…,"message":…}} on stdout
  4  unreachable: the server did not accept the connection within 2 s
     ({"error":{"code":"unreachable",…}} on stdout)`

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("export", "Write a session's history from the server as JSON Lines.", exportHelp, stderr)
	var nf natsFlags
	nf.register(fs)
	session := fs.String("session", "", "session id (required)")
	out := fs.String("out", "", "output file (default stdout); written whole or not at all")
	via := fs.String("via", "auto", "how to read: service (jw.api.history: any role, a tenant's agent too), direct (JetStream reads: operators), auto (the service, else direct)")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if *via != "auto" && *via != "service" && *via != "direct" {
		return usageError(stderr, "export", "--via %q: want auto, service or direct", *via)
	}
	if *session == "" {
		return usageError(stderr, "export", "--session is required")
	}
	if !schema.ValidSession(*session) {
		return usageError(stderr, "export", "invalid session id %q (1-128 bytes of [A-Za-z0-9_-])", *session)
	}
	nf.connectTimeout = clientConnectTimeout
	events, err := exportLoad(ctx, &nf, *via, *session)
	if err == nil && len(events) == 0 {
		err = sessionlog.UnknownSession(*session)
	}
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

// exportLoad reads the session's history as --via says.
func exportLoad(ctx context.Context, nf *natsFlags, via, session string) ([]schema.Event, error) {
	if via == "direct" {
		return nf.loadSession(ctx, "export", session)
	}
	nc, err := nf.connect(ctx, "export", zerolog.Nop())
	if err != nil {
		return nil, err
	}
	events, err := sessionlog.Load(ctx, service.NewClient(nc, service.ClientConfig{Prefix: nf.prefix}), session, schema.DefaultLimits)
	nc.Close()
	if via == "auto" && errors.Is(err, service.ErrNoService) {
		return nf.loadSession(ctx, "export", session)
	}
	return events, err
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
