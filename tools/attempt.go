package tools

import (
	"context"
	"time"

	"github.com/jingwei/jingwei/worker"
)

// attemptTimeout bounds one request of orders.create to its buckets. A
// request sent while a bucket's stream elects a leader (a node lost) is
// dropped, never answered: without the bound it held the body until its
// 10 s timeout although the new leader answers a re-send at once.
const attemptTimeout = time.Second

// retrying runs op with a context of at most attemptTimeout, again after a
// transient failure (worker.Transient: a timed-out or unanswered request,
// a 503 while a leader is elected, no responders), with backoff from 10 ms
// to 500 ms, until it succeeds, fails otherwise or ctx ends. It returns
// op's last error. op must be safe to send again: each caller's re-send
// is a KV create (refused with ErrKeyExists if an unanswered earlier one
// landed), a get, or an update at a revision (refused with a revision
// mismatch).
func retrying[T any](ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	wait := 10 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		v, err := op(actx)
		cancel()
		if err == nil || !worker.Transient(err) || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}
