package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/internal/tracing"
)

// logFlags are the logging flags every command shares:
//
//	--log-format json|console   (default: $JINGWEI_LOG_FORMAT, else json)
//	--log-level  debug|info|warn|error|disabled   (default: $JINGWEI_LOG_LEVEL, else info)
//
// Logs always go to stderr, so stdout stays machine-readable. Use it as
//
//	var lf logFlags
//	lf.register(fs)
//	…parse…
//	log, err := lf.logger(stderr)
type logFlags struct {
	format string
	level  string
}

// Log formats accepted by --log-format.
const (
	logFormatJSON    = "json"
	logFormatConsole = "console"
)

// register adds --log-format and --log-level to fs, with defaults from the
// environment (JINGWEI_LOG_FORMAT, JINGWEI_LOG_LEVEL) so containers can set
// them without flags.
func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", envOr("JINGWEI_LOG_FORMAT", logFormatJSON), "log format on stderr: json or console (env JINGWEI_LOG_FORMAT)")
	fs.StringVar(&l.level, "log-level", envOr("JINGWEI_LOG_LEVEL", "info"), "log level: debug, info, warn, error or disabled (env JINGWEI_LOG_LEVEL)")
}

// logger returns the logger the flags ask for, writing to w (normally the
// command's stderr). An unknown format or level is an error naming the
// accepted values: callers report it as a usage error.
func (l *logFlags) logger(w io.Writer) (zerolog.Logger, error) {
	return newLogger(w, l.format, l.level)
}

// newLogger builds a zerolog logger on w: format "json" (one JSON object per
// line, the default for "") or "console" (human-readable, no colour); level
// as zerolog spells it ("" means info). Commands that do not use logFlags
// call it directly.
func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl := zerolog.InfoLevel
	if level != "" {
		var err error
		lvl, err = zerolog.ParseLevel(strings.ToLower(level))
		if err != nil {
			return zerolog.Nop(), fmt.Errorf("unknown --log-level %q (want debug, info, warn, error or disabled)", level)
		}
	}
	switch strings.ToLower(format) {
	case "", logFormatJSON:
	case logFormatConsole:
		w = zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: time.TimeOnly}
	default:
		return zerolog.Nop(), fmt.Errorf("unknown --log-format %q (want json or console)", format)
	}
	return zerolog.New(w).Level(lvl).Hook(tracing.LogHook).With().Timestamp().Logger(), nil
}

// envOr returns the environment variable key, or def when it is unset or
// empty.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// parseLogged registers the log flags on fs, parses args (parseFlags) and
// returns the logger they ask for; a bad log flag is a usage error of the
// command name. ok false: return st.
func parseLogged(fs *flag.FlagSet, args []string, stderr io.Writer, name string) (log zerolog.Logger, st int, ok bool) {
	var lf logFlags
	lf.register(fs)
	if st, ok := parseFlags(fs, args); !ok {
		return log, st, false
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return log, usageError(stderr, name, "%v", err), false
	}
	return log, 0, true
}
