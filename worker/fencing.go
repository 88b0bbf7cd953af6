package worker

import "context"

// Fence is the fencing token of one call: who may write the call's side
// effect. A session has one writer at a time, and each new writer holds a
// higher Epoch (docs/protocol.md §7); a takeover appends session.fenced at
// its own epoch, after which the old writer's appends to the session log
// are refused. Its body, though, may still be running (a process frozen
// with SIGSTOP, a body that ignores its context): Fence lets the body make
// its own writes refuse it too. A business store that keeps, per resource
// of a session, the highest epoch that wrote it and refuses a write of a
// lower one (see package worker/fence) refuses every write of a writer
// that has been fenced once a newer writer — the next attempt, or a
// reviewer who raised the fence — wrote there.
//
// The token is not the session.fenced event (its body is schema.Fence),
// though it carries the epoch that event raises; docs/packages.md tells
// the four things called fence apart.
//
// Epochs are comparable only within one Session. Key is the logical
// operation's key (stable across retries): an external system that takes
// an idempotency key should be given Key (with Task), never CallID, which
// is new on every attempt.
type Fence struct {
	// Session is the session the call belongs to.
	Session string `json:"session"`
	// Epoch is the epoch of the writer that runs the call; zero when the
	// runtime's log cannot tell (a log without an Epoch method): such a
	// token fences nothing.
	Epoch uint64 `json:"epoch"`
	// CallID is the attempt's call id.
	CallID string `json:"call_id"`
	// Task and Key are the logical operation (BodyRequest.Operation).
	Task string `json:"task"`
	Key  string `json:"key"`
}

type fenceKey struct{}

// WithFence returns ctx carrying f, as the runtime passes it to a body.
// Tests of a body use it to run the body with a token of their choosing.
func WithFence(ctx context.Context, f Fence) context.Context {
	return &fenced{Context: ctx, f: f}
}

// fenced is context.WithValue(ctx, fenceKey{}, f) in one allocation (the
// runtime makes one per call), without f boxed until it is asked for.
type fenced struct {
	context.Context
	f Fence
}

// Value returns the Fence for fenceKey, and what the parent holds for
// any other key.
func (c *fenced) Value(key any) any {
	if _, ok := key.(fenceKey); ok {
		return c.f
	}
	return c.Context.Value(key)
}

// FencingToken returns the fencing token of the call whose body runs under
// ctx, and false outside a body (nothing set with WithFence).
func FencingToken(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}
