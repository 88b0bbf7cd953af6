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

// takeovers is the recoverer's lease service: it watches lease expiry and
// takes over (lease, fence, load, assess, release) the sessions whose lease
// expired with calls open, reconciles at start what expired while no
// recoverer ran, and repairs a takeover a recoverer did not finish.
type takeovers struct {
	*base
	pub     *publisher
	expired <-chan string // the lease watcher; nil once it stopped
}

// start watches lease expiry, then reconciles: watching first, so that no
// expiry falls between the two.
func (r *takeovers) start(ctx context.Context) error {
	expired, err := r.t.WatchLeaseExpiry(ctx)
	if err != nil {
		return err
	}
	if err := r.reconcile(ctx); err != nil {
		return err
	}
	r.expired = expired
	return nil
}

// run takes over the sessions the watcher reports until it stops (a lost
// connection); run again, it watches again and reconciles what expired in
// between.
func (r *takeovers) run(ctx context.Context) error {
	if r.expired == nil {
		if err := r.start(ctx); err != nil {
			return err
		}
	}
	for s := range r.expired {
		r.log.Info().Str("session", s).Msg("lease expired")
		if err := r.takeOverIfOpen(ctx, s, true); err != nil && ctx.Err() == nil {
			r.log.Error().Err(err).Str("session", s).Msg("takeover after lease expiry failed")
		}
	}
	r.expired = nil
	return errors.New("lease watcher stopped")
}

// takeOverIfOpen takes the session over if its log has open calls and no
// lease is live (someone else owning it again will finish or fence them).
// expired says the lease watcher just reported the lease expired (not
// released): then an unfinished takeover is repaired too (finishTakeover).
func (r *takeovers) takeOverIfOpen(ctx context.Context, session string, expired bool) error {
	if _, live, err := r.t.LeaseHolder(ctx, session); err != nil || live {
		return err
	}
	loaded, err := r.t.LoadHistory(ctx, session)
	if err != nil {
		return err
	}
	if len(recovery.OpenIn(loaded.Events, 0)) == 0 {
		if expired {
			return r.finishTakeover(ctx, loaded.Events)
		}
		return nil
	}
	_, _, err = r.takeOver(ctx, session, stream.WithLoaded(loaded))
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
func (r *takeovers) finishTakeover(ctx context.Context, h []schema.Event) error {
	if len(h) == 0 {
		return nil
	}
	last := h[len(h)-1]
	if last.Type != schema.TypeFenced || last.Fence == nil || !strings.HasPrefix(last.Fence.Owner, "recoverer-") {
		return nil
	}
	_, err := r.pub.publishOpen(ctx, last.Session, h, recovery.OpenIn(h, last.Seq))
	return err
}

// takeOver is Recoverer.TakeOver; it also returns the confirmed history.
// opts pass a history the caller loaded just before (stream.WithLoaded),
// so that only what follows it is read after the fence.
func (r *takeovers) takeOver(ctx context.Context, session string, opts ...stream.TakeoverOption) ([]schema.Assessment, []schema.Event, error) {
	tk, err := r.t.TakeOver(ctx, session, r.cfg.Owner, r.t.SessionLeases(), opts...)
	var h []schema.Event
	var epoch, fenceSeq uint64
	switch {
	case errors.Is(err, stream.ErrLogClosed):
		// No room left even for a fence: nobody can append to the log any
		// more, so it is confirmed as it stands; every call open at its
		// end is final.
		if h, err = r.t.Load(ctx, session); err != nil {
			return nil, nil, fmt.Errorf("recoverer: load closed %s: %w", session, err)
		}
		r.log.Info().Str("session", session).Int("events", len(h)).Msg("session log full: confirmed without a fence")
	case err != nil:
		return nil, nil, fmt.Errorf("recoverer: take over %s: %w", session, err)
	default:
		defer func() {
			if err := tk.Hold.Release(context.WithoutCancel(ctx)); err != nil {
				r.log.Warn().Err(err).Str("session", session).Msg("release lease after takeover")
			}
		}()
		h, epoch, fenceSeq = tk.History, tk.Hold.Epoch(), tk.FenceSeq
	}
	r.log.Info().Str("session", session).Uint64("epoch", epoch).Uint64("fence_seq", fenceSeq).Msg("session taken over")
	r.reconcileBudget(ctx, session, h)
	out, err := r.pub.publishOpen(ctx, session, h, recovery.OpenIn(h, fenceSeq))
	if o := r.cfg.Observer; o != nil {
		o.TookOver(session, h, out)
	}
	return out, h, err
}

// reconcile takes over every session that has open calls and no live
// lease (Recoverer.Reconcile). It reads the list of sessions from
// JW_EVENTS and loads each session without a live lease.
func (r *takeovers) reconcile(ctx context.Context) error {
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
func (r *takeovers) reconcileBudget(ctx context.Context, session string, h []schema.Event) {
	b := stream.NewBudget(r.t.Budget)
	for task, n := range stream.CallsPerTask(h) {
		if _, err := b.Reconcile(ctx, session, task, n, 0); err != nil {
			r.log.Warn().Err(err).Str("session", session).Str("task", task).Msg("tool_calls count not reconciled after takeover")
		}
	}
}
