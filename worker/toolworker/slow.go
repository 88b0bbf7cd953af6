package toolworker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jingwei/jingwei/internal/pause"
	"github.com/jingwei/jingwei/worker"
)

// Delay makes bodies slow, for demos and crash tests: a body waits Before
// ahead of its own work and After once its work is done (its side effect
// has happened, its answer is not yet returned). The zero value changes
// nothing.
type Delay struct {
	// Before is the wait before the body runs. Zero: none.
	Before time.Duration
	// After is the wait after the body's work, before its answer is
	// returned: a crash then leaves an executed call without a result.
	// Zero: none.
	After time.Duration
}

// Wrap returns the tools with their bodies slowed by d. The waits end early
// when the body's context is cancelled (before: the body does not run;
// after: the body's answer is replaced by the context's error). Metadata,
// schema, timeout and output limit are kept.
func (d Delay) Wrap(tools ...worker.Tool) []worker.Tool {
	out := make([]worker.Tool, len(tools))
	for i, t := range tools {
		if d.Before <= 0 && d.After <= 0 {
			out[i] = t
			continue
		}
		body := t.Body
		t.Body = func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			if err := wait(ctx, d.Before); err != nil {
				return nil, err
			}
			b, err := body(ctx, req)
			if werr := wait(ctx, d.After); werr != nil && err == nil {
				return nil, werr
			}
			return b, err
		}
		out[i] = t
	}
	return out
}

// wait is the delay d (none if d <= 0, whatever ctx).
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return pause.For(ctx, d)
}
