package stream

import (
	"context"
	"errors"
	"time"

	"github.com/jingwei/jingwei/schema"
)

// Hold is an owner's right to write one session at one epoch, with a guard
// by the local clock: Err says, before every append, whether the hold can
// still be trusted. *LeaseHold is the per-session lease's hold; a hold on
// a partition of sessions (one lease for many) is another implementation,
// which TakeOver and GuardedLog take just the same. Implementations are
// safe for concurrent use.
type Hold interface {
	// Session is the session held.
	Session() string
	// Owner is the holder, as written on session.fenced.
	Owner() string
	// Epoch is the writer epoch that goes with the hold: above every
	// epoch on the session log.
	Epoch() uint64
	// Err is nil while the hold can be trusted, and from the first moment
	// it cannot (lost, not renewed within its TTL by the local clock,
	// fenced) an error that matches ErrHoldLost and ErrFenced, for good.
	Err() error
	// Lose ends the hold for good with err (Err then returns it, wrapped).
	Lose(err error)
	// Release gives the hold up; afterwards Err is not nil.
	Release(ctx context.Context) error
}

// Acquirer takes holds on sessions for TakeOver: AcquireLease behind
// Leases.SessionLeases today.
type Acquirer interface {
	// Acquire takes the hold of session for owner, or fails (ErrLeaseHeld
	// when someone else holds it).
	Acquire(ctx context.Context, session, owner string) (Hold, error)
}

// AcquirerFunc adapts a function to Acquirer.
type AcquirerFunc func(ctx context.Context, session, owner string) (Hold, error)

// Acquire calls f.
func (f AcquirerFunc) Acquire(ctx context.Context, session, owner string) (Hold, error) {
	return f(ctx, session, owner)
}

// SessionLeases returns the Acquirer of per-session leases: HoldLease
// without a lost callback.
func (ls Leases) SessionLeases() Acquirer {
	return AcquirerFunc(func(ctx context.Context, session, owner string) (Hold, error) {
		return ls.HoldLease(ctx, session, owner, nil)
	})
}

// LeaseHold is the Hold of a per-session lease (AcquireLease): it trusts
// the lease until one LeaseTTL after the start of its latest successful
// write, by the local clock, so a writer whose renewals stall stops
// appending before the server lets the lease expire and someone else
// fences it. Build it with HoldLease; renew it with Renew.
type LeaseHold struct {
	lease *Lease
	guard *holdGuard // the lease's expiry by our clock, and why the hold ended
}

// HoldLease acquires the session's lease for owner (AcquireLease) and
// holds it. onLost, when not nil, is called once, when the hold ends for
// any reason but Release.
func (ls Leases) HoldLease(ctx context.Context, session, owner string, onLost func(error)) (*LeaseHold, error) {
	t := ls.t
	t0 := time.Now()
	l, err := ls.AcquireLease(ctx, session, owner)
	if err != nil {
		return nil, err
	}
	return &LeaseHold{lease: l, guard: newLeaseGuard("lease of "+session, t.cfg.LeaseTTL, t0, onLost)}, nil
}

// Lease returns the lease held.
func (h *LeaseHold) Lease() *Lease { return h.lease }

// Session returns the lease's session.
func (h *LeaseHold) Session() string { return h.lease.Session }

// Owner returns the lease's owner.
func (h *LeaseHold) Owner() string { return h.lease.Owner }

// Epoch returns the lease's epoch.
func (h *LeaseHold) Epoch() uint64 { return h.lease.Epoch }

// Renew renews the lease (Lease.Renew) and, once the server took the
// write, trusts it one TTL from when the renewal started. A lease that
// expired or changed hands (ErrLeaseLost), or that could not be renewed
// before its TTL ran out by the local clock, ends the hold; another
// failure is returned and the hold kept while its time lasts.
func (h *LeaseHold) Renew(ctx context.Context) error {
	if err := h.Err(); err != nil {
		return err
	}
	t0 := time.Now()
	if err := h.lease.Renew(ctx); err != nil {
		h.guard.failed(err)
		return err
	}
	h.guard.renewed(t0, nil)
	return nil
}

// Err returns nil while the lease can be trusted by the local clock; once
// it cannot, the error that ended the hold (see Hold.Err).
func (h *LeaseHold) Err() error { return h.guard.Err() }

// Lose ends the hold with err, wrapped so that it matches ErrHoldLost and
// ErrFenced (the runtime then stops writing for good), and calls the lost
// callback once.
func (h *LeaseHold) Lose(err error) { h.guard.Lose(err) }

// Release gives the lease up (Lease.Release) if the hold is still good;
// the hold ends either way, without the lost callback.
func (h *LeaseHold) Release(ctx context.Context) error {
	if err := h.Err(); err != nil {
		return err
	}
	h.guard.end(errReleased)
	return h.lease.Release(ctx)
}

// Takeover is a confirmed session: the hold, the log fenced at the hold's
// epoch behind its guard, and the history loaded after the fence. From
// the fence on, no older writer can append, so History is confirmed.
type Takeover struct {
	// Hold is what the session is held by.
	Hold Hold
	// Log appends at the hold's epoch and refuses once the hold fails.
	Log *GuardedLog
	// History is the session log through the fence.
	History []schema.Event
	// FenceSeq is the stream sequence of the session.fenced appended, or
	// with Resumed the sequence of the log's last event when it was read.
	FenceSeq uint64
	// Resumed is true when the log's last event was already the hold's
	// own (its owner at its epoch: the hold confirmed the session before
	// and nobody can have appended after it), so no fence was appended.
	Resumed bool
}

// TakeoverOption changes how a takeover loads its history.
type TakeoverOption func(*takeoverOptions)

type takeoverOptions struct {
	loaded Loaded
}

// WithLoaded tells Confirm (and TakeOver) that the caller loaded the
// session's history just before (LoadHistory): once the fence is in, only
// what follows it is read, and the confirmed history is l's events plus
// those, with the limits counted over all of them. It must be the same
// session's history.
func WithLoaded(l Loaded) TakeoverOption {
	return func(o *takeoverOptions) { o.loaded = l }
}

// Confirm fences the session of hold at its epoch (FenceLoad) and returns
// the takeover with the confirmed history and the guarded log. A log whose
// last event is already the hold's own (its owner, its epoch) is confirmed
// for it: the history is loaded and no fence appended (Takeover.Resumed),
// so an owner that dropped a session from memory picks it up again with
// reads only. A hold that is no longer good fails before anything is
// written. A log with no room even for a fence is ErrLogClosed: nobody can
// append to it any more, so its Load is confirmed as it stands. Confirm
// does not release the hold.
func (ls Leases) Confirm(ctx context.Context, hold Hold, opts ...TakeoverOption) (*Takeover, error) {
	t := ls.t
	if err := hold.Err(); err != nil {
		return nil, err
	}
	var o takeoverOptions
	for _, opt := range opts {
		opt(&o)
	}
	lg, h, fenceSeq, resumed, err := t.Logs().fenceLoad(ctx, hold.Session(), hold.Owner(), hold.Epoch(), o.loaded, true)
	if err != nil {
		return nil, err
	}
	return &Takeover{Hold: hold, Log: &GuardedLog{log: lg, hold: hold}, History: h, FenceSeq: fenceSeq, Resumed: resumed}, nil
}

// TakeOver takes the session over for owner: it acquires a hold from acq
// (a new, higher epoch), fences the log and loads the confirmed history
// (Confirm, with opts). On any failure after the hold was acquired the hold is
// released, so nothing is left held. Errors: ErrLeaseHeld (someone holds
// the session), ErrLogClosed (the log is full: Load it, it is confirmed
// as it stands), the errors of FenceLoad.
func (ls Leases) TakeOver(ctx context.Context, session, owner string, acq Acquirer, opts ...TakeoverOption) (*Takeover, error) {
	t := ls.t
	hold, err := acq.Acquire(ctx, session, owner)
	if err != nil {
		return nil, err
	}
	tk, err := ls.Confirm(ctx, hold, opts...)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.RequestTimeout)
		defer cancel()
		_ = hold.Release(rctx)
		return nil, err
	}
	return tk, nil
}

// GuardedLog is a session log behind its hold's guard: every append is
// refused once the hold is no longer good (lost, not renewed in time by
// the local clock), and a fenced or conflicting append ends the hold. It
// is the worker.Appender a takeover gives a runtime. Safe for concurrent
// use.
type GuardedLog struct {
	log  *Log
	hold Hold
}

// Append appends ev unless the hold is no longer good.
func (g *GuardedLog) Append(ctx context.Context, ev schema.Event) (uint64, error) {
	if err := g.hold.Err(); err != nil {
		return 0, err
	}
	seq, err := g.log.Append(ctx, ev)
	if err != nil && (errors.Is(err, ErrFenced) || errors.Is(err, ErrConflict)) {
		g.hold.Lose(err)
		return 0, g.hold.Err()
	}
	return seq, err
}

// Session returns the session id.
func (g *GuardedLog) Session() string { return g.log.Session() }

// Epoch returns the writer's epoch (what a runtime records with a plan's
// consumption).
func (g *GuardedLog) Epoch() uint64 { return g.log.Epoch() }

// Room returns how much the log may still hold (Log.Room).
func (g *GuardedLog) Room() (int, int64) { return g.log.Room() }

// MaxPayload is the guarded log's (Log.MaxPayload).
func (g *GuardedLog) MaxPayload() int { return g.log.MaxPayload() }

// LastSeq returns the sequence of the log's last message (Log.LastSeq).
func (g *GuardedLog) LastSeq() uint64 { return g.log.LastSeq() }
