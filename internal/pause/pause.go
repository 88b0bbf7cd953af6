// Package pause is a wait that ends with its context: the one the
// infrastructure retry loops, the chaos harness and the example tools'
// delays share.
package pause

import (
	"context"
	"time"
)

// For waits d, or until ctx ends, and returns ctx's error if it ended
// first. With d <= 0 it does not wait and returns ctx's error, if any.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
