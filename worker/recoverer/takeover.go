package recoverer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// takeOverIfOpen takes the session over if its log has open calls and no
// lease is live (someone else owning it again will finish or fence them).
// expired says the lease watcher just reported the lease expired (not
// released): then an unfinished takeover is repaired too (finishTakeover).
func (r *Recoverer) takeOverIfOpen(ctx context.Context, session string, expired bool) error {
	if _, live, err := r.t.LeaseHolder(ctx, session); err != nil || live {
		return err
	}
	h, err := r.t.Load(ctx, session)
	if err != nil {
		return err
	}
	if len(openIn(h, 0)) == 0 {
		if expired {
			return r.finishTakeover(ctx, h)
		}
		return nil
	}
	_, err = r.TakeOver(ctx, session)
	if errors.Is(err, stream.ErrLeaseHeld) {
		r.log.Info().Str("session", session).Msg("session owned again before takeover; left to its owner")
		return nil
	}
	return err
}

// finishTakeover repairs a takeover a recoverer did not finish: if the log
// ends with a session.fenced by a recoverer (an owner named
// "recoverer-…", the default) whose lease then expired instead of being
// released, that recoverer died between the fence and its assessments.
// The calls the fence closed are assessed and published now (with
// Nats-Msg-Id, so a finished takeover's are not repeated within the dedup
// window).
func (r *Recoverer) finishTakeover(ctx context.Context, h []schema.Event) error {
	if len(h) == 0 {
		return nil
	}
	last := h[len(h)-1]
	if last.Type != schema.TypeFenced || last.Fence == nil || !strings.HasPrefix(last.Fence.Owner, "recoverer-") {
		return nil
	}
	for _, id := range openIn(h, last.Seq) {
		a, err := recovery.Inspect(schema.Events(h), id)
		if err != nil {
			continue
		}
		if err := r.publishAssessment(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// TakeOver takes the session over and confirms its history: it acquires the
// session's lease (a new, higher epoch), appends session.fenced (from then
// on the old writer's appends fail with stream.ErrFenced), loads the log,
// inspects every call that was open before the fence and publishes their
// assessments, then releases the lease so a tool worker can own the session
// again. It returns the assessments. It fails with an error matching
// stream.ErrLeaseHeld if the lease is live.
func (r *Recoverer) TakeOver(ctx context.Context, session string) ([]schema.Assessment, error) {
	lease, err := r.t.AcquireLease(ctx, session, r.cfg.Owner)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
			r.log.Warn().Err(err).Str("session", session).Msg("release lease after takeover")
		}
	}()
	var fenceSeq uint64
	lg, h, err := r.t.FenceLoad(ctx, session, r.cfg.Owner, lease.Epoch)
	switch {
	case errors.Is(err, stream.ErrLogClosed):
		// No room left even for a fence: nobody can append to the log any
		// more, so it is confirmed as it stands; every call open at its
		// end is final.
		if h, err = r.t.Load(ctx, session); err != nil {
			return nil, fmt.Errorf("recoverer: load closed %s: %w", session, err)
		}
		r.log.Info().Str("session", session).Int("events", len(h)).Msg("session log full: confirmed without a fence")
	case err != nil:
		return nil, fmt.Errorf("recoverer: fence and load %s: %w", session, err)
	default:
		fenceSeq = lg.LastSeq()
	}
	r.log.Info().Str("session", session).Uint64("epoch", lease.Epoch).Uint64("fence_seq", fenceSeq).Msg("session taken over")
	r.reconcileBudget(ctx, session, h)
	var out []schema.Assessment
	for _, id := range openIn(h, fenceSeq) {
		a, err := recovery.Inspect(schema.Events(h), id)
		if err != nil {
			r.log.Warn().Err(err).Str("session", session).Str("call_id", id).Msg("call not assessed after takeover")
			continue
		}
		if err := r.publishAssessment(ctx, a); err != nil {
			return out, err
		}
		out = append(out, a)
	}
	return out, nil
}

// Reconcile takes over every session that has open calls and no live lease:
// what a recoverer that was down while leases expired missed. Run calls it
// once at start, after it started watching lease expiry. It reads the list
// of sessions from JW_EVENTS and loads each session without a live lease.
func (r *Recoverer) Reconcile(ctx context.Context) error {
	info, err := r.t.Events.Info(ctx, jetstream.WithSubjectFilter(r.t.EventsSubject("*")))
	if err != nil {
		return fmt.Errorf("recoverer: list sessions: %w", err)
	}
	pre := r.t.EventsSubject("")
	for subj := range info.State.Subjects {
		session := strings.TrimPrefix(subj, pre)
		if err := r.takeOverIfOpen(ctx, session, false); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.log.Error().Err(err).Str("session", session).Msg("reconcile: takeover failed")
			continue
		}
	}
	r.log.Info().Int("sessions", len(info.State.Subjects)).Msg("reconciled")
	return nil
}

// reconcileBudget raises every task's tool_calls count in jw_budget to at
// least the tool.call events of that task in the confirmed history h: a
// writer that crashed may not have written the counts it kept off its call
// path, and every recorded attempt counts. Counts never go down. Failures
// are logged: the next owner of the session reconciles again.
func (r *Recoverer) reconcileBudget(ctx context.Context, session string, h []schema.Event) {
	b := stream.NewBudget(r.t.Budget)
	for task, n := range stream.CallsPerTask(h) {
		if _, err := b.Reconcile(ctx, session, task, n, 0); err != nil {
			r.log.Warn().Err(err).Str("session", session).Str("task", task).Msg("tool_calls count not reconciled after takeover")
		}
	}
}
