package prober

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker"
)

// request builds the probe's input from the session's log: the call's
// arguments and operation, and the epoch the session was fenced at after
// the call (the probe raises its store's fence to it before it looks). A
// call the log does not hold is not probed. A session not fenced after the
// call (a timeout whose writer still holds the session: its body may still
// be running) gives epoch 0: the probe may still find the effect, but its
// not_found is never authoritative then.
func (p *Prober) request(ctx context.Context, a schema.Assessment) (worker.BodyRequest, error) {
	h, err := p.cfg.Topology.Logs().Load(ctx, a.Session)
	if err != nil {
		return worker.BodyRequest{}, fmt.Errorf("prober: load %s: %w", a.Session, err)
	}
	var call *schema.Call
	var epoch uint64
	for i := range h {
		ev := &h[i]
		switch {
		case ev.Type == schema.TypeCall && ev.Call != nil && ev.Call.CallID == a.CallID:
			call = ev.Call
		case call != nil && ev.Type == schema.TypeFenced && ev.Fence != nil && ev.Fence.Epoch > epoch:
			epoch = ev.Fence.Epoch
		}
	}
	if call == nil || call.Operation == nil {
		return worker.BodyRequest{}, fmt.Errorf("%w: call %q is not an operation of session %s's log", ErrNotProbed, a.CallID, a.Session)
	}
	op := call.Operation
	return worker.BodyRequest{
		Session: a.Session, CallID: a.CallID, Arguments: call.Arguments,
		Operation: worker.Operation{Task: op.Task, Key: op.Key, Contract: op.Contract},
		Fence:     worker.Fence{Session: a.Session, Epoch: epoch, CallID: a.CallID, Task: op.Task, Key: op.Key},
	}, nil
}

// errBadAnswer is a probe output that is not a Result.
var errBadAnswer = errors.New("probe output is not {answer, evidence}")

// run runs the probe up to Attempts times, each bounded by Timeout (a body
// that ignores its context is abandoned, not waited for), and returns the
// first answer. unknown is an answer: it is not retried.
func (p *Prober) run(ctx context.Context, probe worker.Tool, req worker.BodyRequest) (Result, error) {
	var last error
	for i := 0; i < p.cfg.Attempts; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return Result{}, ctx.Err()
			case <-time.After(p.cfg.Backoff):
			}
		}
		res, err := p.once(ctx, probe, req)
		if err == nil {
			return res, nil
		}
		last = err
		p.cfg.Logger.Debug().Err(err).Int("attempt", i+1).Str("probe", probe.Metadata.Name).Str("call_id", req.CallID).Msg("probe attempt failed")
	}
	return Result{}, fmt.Errorf("probe %s: %d attempts: %w", probe.Metadata.Name, p.cfg.Attempts, last)
}

func (p *Prober) once(ctx context.Context, probe worker.Tool, req worker.BodyRequest) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	type answer struct {
		out json.RawMessage
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		out, err := probe.Body(ctx, req)
		ch <- answer{out, err}
	}()
	var got answer
	select {
	case <-ctx.Done():
		return Result{}, fmt.Errorf("probe %s: %w", probe.Metadata.Name, ctx.Err())
	case got = <-ch:
	}
	if got.err != nil {
		return Result{}, got.err
	}
	var res Result
	if err := json.Unmarshal(got.out, &res); err != nil {
		return Result{}, fmt.Errorf("%w: %w", errBadAnswer, err)
	}
	switch res.Answer {
	case Found, NotFound, Unknown:
		return res, nil
	}
	return Result{}, fmt.Errorf("%w: answer %q", errBadAnswer, res.Answer)
}
