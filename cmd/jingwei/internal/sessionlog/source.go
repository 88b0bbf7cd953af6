package sessionlog

import (
	"context"
	"fmt"
	"os"

	"github.com/jingwei/jingwei/schema"
)

// Source is where an offline command (inspect, plan) reads a history
// from: a JSON Lines file, or a session loaded from a live server. Exactly
// one of File and Session is set (Check).
type Source struct {
	File    string
	Session string
}

// Check returns a usage problem, or "" when exactly one source is chosen.
func (s Source) Check() string {
	switch {
	case s.File == "" && s.Session == "":
		return "--history or --session is required"
	case s.File != "" && s.Session != "":
		return "give --history or --session, not both"
	case s.Session != "" && !schema.ValidSession(s.Session):
		return fmt.Sprintf("invalid session id %q (1-128 bytes of [A-Za-z0-9_-])", s.Session)
	}
	return ""
}

// Open returns the history and a function that releases it; load reads
// the session from the server. An error means the source could not be
// opened at all (a usage problem: wrong path, permissions); errors while
// reading, a failure to reach the server included, come through the
// history itself.
func (s Source) Open(ctx context.Context, load func(ctx context.Context, session string) ([]schema.Event, error)) (schema.History, func(), error) {
	if s.Session != "" {
		events, err := load(ctx, s.Session)
		if err != nil {
			return func(yield func(schema.Event, error) bool) { yield(schema.Event{}, err) }, func() {}, nil
		}
		return schema.Events(events), func() {}, nil
	}
	f, err := os.Open(s.File)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open history: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, nil, fmt.Errorf("cannot read history: %s is a directory", s.File)
	}
	h := schema.NewHistoryReader(f, schema.DefaultLimits).All()
	return h, func() { f.Close() }, nil
}
