package tools

import (
	"context"
	"time"

	"github.com/jingwei/jingwei/stream"
)

// attemptTimeout bounds one request of orders.create to its buckets. A
// request sent while a bucket's stream elects a leader (a node lost) is
// dropped, never answered: without the bound it held the body until its
// 10 s timeout although the new leader answers a re-send at once.
const attemptTimeout = time.Second

// attemptRetry is how orders.create tries each request to its buckets:
// attempts of attemptTimeout, again after a transient failure with
// backoff from 10 ms to 500 ms, until its body's context ends.
var attemptRetry = stream.RetryPolicy{Attempt: attemptTimeout, First: 10 * time.Millisecond, Max: 500 * time.Millisecond}

// retrying is stream.Retrying with attemptRetry. op must be safe to send
// again: each caller's re-send is a KV create (refused with ErrKeyExists
// if an unanswered earlier one landed), a get, or an update at a revision
// (refused with a revision mismatch).
func retrying[T any](ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	return stream.Retrying(ctx, attemptRetry, op)
}
