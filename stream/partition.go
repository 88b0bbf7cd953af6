package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// Partition leases.
//
// A tool worker owns a partition of sessions (Partition, PartitionOf)
// through the partition's lease: key partition.<p> in jw_leases, created
// with the per-key TTL and renewed by a compare-and-set publish, exactly
// like a session's lease. Its epoch comes from the counter
// epoch.partition.<p> (no TTL) and grows by partitionEpochStep on every
// acquisition, so the epoch just above an owner's (its epoch + 1) is never
// an owner's: the recovery worker fences the sessions of a dead owner
// there (RecoveryHolds), below every later owner.
//
// The writer epoch of a session is the partition lease's epoch when its
// owner confirms it (ConfirmIn). A session whose log is already at or
// above that epoch (a writer outside the partition scheme fenced it, or
// the recovery worker at the owner's epoch + 1 after a raise) makes the
// owner raise the partition's epoch above the log first (Raise): the
// counter is moved up, then the lease itself is rewritten with the new
// epoch by compare-and-set, so only a live owner ever writes at it. Every
// session.fenced is therefore above everything on its log, and epochs on
// a log only grow.

// partitionEpochStep is how much an acquisition raises a partition's
// epoch: the odd epoch between two owners is the recovery worker's.
const partitionEpochStep = 2

func partitionKey(p int) string      { return "partition." + strconv.Itoa(p) }
func partitionEpochKey(p int) string { return "epoch.partition." + strconv.Itoa(p) }

// PartitionHold is a tool worker's hold on one partition of sessions: the
// partition's lease with the lease-clock guard LeaseHold has too
// (holdGuard: it trusts the lease until one LeaseTTL after the start of
// its latest successful write, by the local clock, so an owner whose
// renewals stall stops appending before the server can let the lease
// expire), and the epoch its sessions are written at. Session returns the per-session Hold a takeover takes.
// Build it with AcquirePartition. Safe for concurrent use.
type PartitionHold struct {
	t         *Topology
	partition int
	owner     string
	base      uint64
	guard     *holdGuard // the lease's expiry by our clock, and why the hold ended

	wmu sync.Mutex // serializes the lease writes (renew, raise, release)

	mu    sync.Mutex // taken after guard's lock, never before
	rev   uint64     // KV revision of the latest lease write
	epoch uint64     // the epoch sessions are confirmed at now
}

// AcquirePartition takes partition p's lease for owner, with an epoch above
// every earlier owner's, for the topology's LeaseTTL. It returns
// ErrLeaseHeld (naming the holder) if the lease is live. onLost, when not
// nil, is called once when the hold ends for any reason but Release. The
// caller renews it (Renew) well within the TTL.
func (ls Leases) AcquirePartition(ctx context.Context, p int, owner string, onLost func(error)) (*PartitionHold, error) {
	t := ls.t
	if p < 0 || p >= t.cfg.Partitions {
		return nil, fmt.Errorf("stream: AcquirePartition: partition %d of %d", p, t.cfg.Partitions)
	}
	if owner == "" {
		return nil, errors.New("stream: AcquirePartition: empty owner")
	}
	key := partitionKey(p)
	if held, err := t.LeaseBucket.Get(ctx, key); err == nil {
		return nil, partitionHeldError(p, held.Value())
	}
	t0 := time.Now()
	epoch, err := ls.raiseCounter(ctx, p, 0)
	if err != nil {
		return nil, err
	}
	rev, held, err := ls.createLease(ctx, key, LeaseValue{Owner: owner, Epoch: epoch, Base: epoch, At: time.Now().UTC()})
	switch {
	case held != nil:
		return nil, partitionHeldError(p, held)
	case err != nil:
		return nil, fmt.Errorf("stream: acquire partition %d: %w", p, err)
	}
	guard := newLeaseGuard("lease of partition "+strconv.Itoa(p), t.cfg.LeaseTTL, t0, onLost)
	return &PartitionHold{t: t, partition: p, owner: owner, base: epoch, guard: guard, rev: rev, epoch: epoch}, nil
}

// raiseCounter moves partition p's epoch counter to a new epoch above
// both its value and above, by partitionEpochStep, and returns it
// (epochCounter).
func (ls Leases) raiseCounter(ctx context.Context, p int, above uint64) (uint64, error) {
	t := ls.t
	c := epochCounter{kv: t.LeaseBucket, key: partitionEpochKey(p), what: "partition " + strconv.Itoa(p), step: partitionEpochStep}
	return c.draw(ctx, func(context.Context) (uint64, error) { return above, nil })
}

func partitionHeldError(p int, v []byte) error {
	var lv LeaseValue
	_ = json.Unmarshal(v, &lv)
	return fmt.Errorf("%w: partition %d held by %q at epoch %d", ErrLeaseHeld, p, lv.Owner, lv.Epoch)
}

// PartitionHolder returns the value of partition p's live lease, ok false
// if nobody holds it.
func (ls Leases) PartitionHolder(ctx context.Context, p int) (LeaseValue, bool, error) {
	return ls.leaseValue(ctx, partitionKey(p))
}

// leaseValue reads a lease key; ok is false if it is not live.
func (ls Leases) leaseValue(ctx context.Context, key string) (LeaseValue, bool, error) {
	t := ls.t
	e, err := t.LeaseBucket.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return LeaseValue{}, false, nil
	}
	if err != nil {
		return LeaseValue{}, false, fmt.Errorf("stream: read lease %s: %w", key, err)
	}
	var lv LeaseValue
	if err := json.Unmarshal(e.Value(), &lv); err != nil {
		return LeaseValue{}, false, fmt.Errorf("stream: lease %s: %w", key, err)
	}
	return lv, true, nil
}

// Partition returns the partition held.
func (h *PartitionHold) Partition() int { return h.partition }

// Owner returns the holder.
func (h *PartitionHold) Owner() string { return h.owner }

// Base returns the epoch the partition was acquired at.
func (h *PartitionHold) Base() uint64 { return h.base }

// Epoch returns the epoch sessions are confirmed at now: the acquisition
// epoch, or above it after a Raise.
func (h *PartitionHold) Epoch() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch
}

// Err returns nil while the lease can be trusted by the local clock; once
// it cannot, the error that ended the hold, for good (it matches
// ErrHoldLost and ErrFenced).
func (h *PartitionHold) Err() error { return h.guard.Err() }

// Lose ends the hold with err (wrapped so that it matches ErrHoldLost and
// ErrFenced) and calls the lost callback once.
func (h *PartitionHold) Lose(err error) { h.guard.Lose(err) }

// write publishes the lease's value at epoch by compare-and-set on its
// last revision, with the TTL again, and trusts it one TTL from t0.
// h.wmu is held.
func (h *PartitionHold) write(ctx context.Context, epoch uint64, t0 time.Time) error {
	h.mu.Lock()
	rev := h.rev
	h.mu.Unlock()
	msg := h.t.Leases().leaseMsg(partitionKey(h.partition), LeaseValue{Owner: h.owner, Epoch: epoch, Base: h.base, At: time.Now().UTC()})
	ctx, cancel := context.WithTimeout(ctx, h.t.cfg.RequestTimeout)
	defer cancel()
	ack, err := h.t.Leases().rewriteLease(ctx, msg, rev)
	if err != nil && isWrongLastSeq(err) {
		if own, ok := h.ownRevision(ctx, rev); ok {
			ack, err = h.t.Leases().rewriteLease(ctx, msg, own)
		}
	}
	if err != nil {
		if isWrongLastSeq(err) {
			err = fmt.Errorf("%w: partition %d (epoch %d)", ErrLeaseLost, h.partition, epoch)
		} else {
			err = fmt.Errorf("stream: write lease of partition %d: %w", h.partition, err)
		}
		h.guard.failed(err)
		return err
	}
	h.guard.renewed(t0, func() {
		h.mu.Lock()
		h.rev, h.epoch = ack.Sequence, epoch
		h.mu.Unlock()
	})
	return nil
}

// ownRevision returns the revision of the partition's lease, ok true, when
// it is not rev and its value names this hold (the owner is unique per
// process, the base per acquisition): a write of ours whose answer was
// lost (cancelled, timed out) may be the latest, and the lease is still
// ours.
func (h *PartitionHold) ownRevision(ctx context.Context, rev uint64) (uint64, bool) {
	e, err := h.t.LeaseBucket.Get(ctx, partitionKey(h.partition))
	if err != nil || e.Revision() == rev {
		return 0, false
	}
	var lv LeaseValue
	if json.Unmarshal(e.Value(), &lv) != nil || lv.Owner != h.owner || lv.Base != h.base {
		return 0, false
	}
	return e.Revision(), true
}

// Renew renews the partition's lease and, once the server took the write,
// trusts it one TTL from when the renewal started. A lease that expired
// or changed hands (ErrLeaseLost), or that could not be renewed before its
// TTL ran out by the local clock, ends the hold; another failure is
// returned and the hold kept while its time lasts.
func (h *PartitionHold) Renew(ctx context.Context) error {
	if err := h.Err(); err != nil {
		return err
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	t0 := time.Now()
	return h.write(ctx, h.Epoch(), t0)
}

// Raise moves the hold's epoch above above (a session log's highest
// epoch): the partition's counter first, then the lease itself by
// compare-and-set, so that a hold that was lost meanwhile never writes at
// the new epoch. It returns the new epoch, which sessions confirmed from
// then on are written at (sessions confirmed before keep theirs). An epoch
// already above above is returned as it is.
func (h *PartitionHold) Raise(ctx context.Context, above uint64) (uint64, error) {
	if err := h.Err(); err != nil {
		return 0, err
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if e := h.Epoch(); e > above {
		return e, nil
	}
	t0 := time.Now()
	next, err := h.t.Leases().raiseCounter(ctx, h.partition, max(above, h.Epoch()))
	if err != nil {
		return 0, err
	}
	if err := h.write(ctx, next, t0); err != nil {
		return 0, err
	}
	return next, nil
}

// Release gives the lease up (a delete marker, which watchers of expiry do
// not report) if the hold is still good; the hold ends either way, without
// the lost callback.
func (h *PartitionHold) Release(ctx context.Context) error {
	if err := h.Err(); err != nil {
		return err
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.guard.end(errReleased)
	h.mu.Lock()
	rev := h.rev
	h.mu.Unlock()
	err := h.t.LeaseBucket.Delete(ctx, partitionKey(h.partition), jetstream.LastRevision(rev))
	if err != nil && (errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err)) {
		if own, ok := h.ownRevision(ctx, rev); ok {
			err = h.t.LeaseBucket.Delete(ctx, partitionKey(h.partition), jetstream.LastRevision(own))
		}
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err) {
			return fmt.Errorf("%w: partition %d", ErrLeaseLost, h.partition)
		}
		return fmt.Errorf("stream: release partition %d: %w", h.partition, err)
	}
	return nil
}

// Session returns the hold on one session of the partition at the
// partition's current epoch: what Confirm fences the session with. It
// ends with the partition's hold; Lose and Release end it alone (a session
// fenced by another writer is lost, the partition is not).
func (h *PartitionHold) Session(session string) Hold {
	return &sessionHold{ph: h, session: session, epoch: h.Epoch()}
}

// sessionHold is one session of a partition hold, at a fixed epoch.
type sessionHold struct {
	ph      *PartitionHold
	session string
	epoch   uint64
	guard   holdGuard // no clock: the partition's hold has it
}

func (s *sessionHold) Session() string { return s.session }
func (s *sessionHold) Owner() string   { return s.ph.owner }
func (s *sessionHold) Epoch() uint64   { return s.epoch }

func (s *sessionHold) Err() error {
	if err := s.guard.Err(); err != nil {
		return err
	}
	return s.ph.Err()
}

func (s *sessionHold) Lose(err error) { s.guard.Lose(err) }

func (s *sessionHold) Release(context.Context) error {
	if err := s.Err(); err != nil {
		return err
	}
	s.Lose(errReleased)
	return nil
}

// ConfirmIn confirms a session of the partition for its owner: Confirm with
// the partition's Session hold. A log already at or above the hold's epoch
// (another writer fenced the session) makes the owner raise the
// partition's epoch above the log's (Raise) and confirm again, at most a
// few times. A log whose tail is the hold's own (this owner at this
// epoch, which nobody can have appended after) is loaded without a new
// fence (Takeover.Resumed).
func (ls Leases) ConfirmIn(ctx context.Context, h *PartitionHold, session string, opts ...TakeoverOption) (*Takeover, error) {
	t := ls.t
	if t.Names().PartitionOf(session) != h.partition {
		return nil, fmt.Errorf("stream: ConfirmIn: session %s is in partition %d, not %d", session, t.Names().PartitionOf(session), h.partition)
	}
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		hold := h.Session(session)
		var tk *Takeover
		tk, err = ls.Confirm(ctx, hold, opts...)
		if err == nil {
			return tk, nil
		}
		if !errors.Is(err, ErrFenced) || errors.Is(err, ErrHoldLost) {
			return nil, err
		}
		high, herr := t.Logs().HighestEpoch(ctx, session)
		if herr != nil {
			return nil, herr
		}
		if high < hold.Epoch() {
			return nil, err
		}
		if _, err := h.Raise(ctx, high); err != nil {
			return nil, err
		}
	}
	return nil, err
}

// Writer returns whoever may still be writing the session: the holder of
// the session's own lease, or the holder of its partition's lease when
// that holder wrote the log's last event (its owner, at an epoch from the
// hold's acquisition on). ok is false when neither is live: every call
// open on the log belongs to a writer that is gone, and the log may be
// taken over (RecoveryHolds).
func (lg Logs) Writer(ctx context.Context, session string) (LeaseValue, bool, error) {
	if err := ValidateSession(session); err != nil {
		return LeaseValue{}, false, err
	}
	tl, ok, err := lg.lastMsg(ctx, session)
	if err != nil {
		return LeaseValue{}, false, err
	}
	return lg.writerOf(ctx, session, tl, ok)
}

// writerOf is Writer for a tail read before (ok false: an empty log).
func (lg Logs) writerOf(ctx context.Context, session string, tl tail, ok bool) (LeaseValue, bool, error) {
	t := lg.t
	if lv, live, err := t.Leases().LeaseHolder(ctx, session); err != nil || live {
		return lv, live, err
	}
	if !ok || t.cfg.Partitions == 0 {
		return LeaseValue{}, false, nil
	}
	lv, live, err := t.Leases().PartitionHolder(ctx, t.Names().PartitionOf(session))
	if err != nil || !live {
		return LeaseValue{}, false, err
	}
	if tl.owner == lv.Owner && tl.epoch >= lv.Base {
		return lv, true, nil
	}
	return LeaseValue{}, false, nil
}

// RecoveryHolds returns the Acquirer a recovery worker takes sessions over
// with when their writer is gone, without any lease: the hold it gives is
// at the epoch just above the log's last event, and only while nobody may
// still write the session (Writer; otherwise ErrLeaseHeld naming the
// writer). A partition's later owner has a higher epoch still (its epoch
// grows by two on every acquisition), so such a fence never stops a live
// owner: one that fences the session afterwards simply follows it, and
// one that fenced it in between makes the recovery fence fail with
// ErrFenced (its own fence closed the calls). Releasing the hold writes
// nothing.
func (ls Leases) RecoveryHolds() Acquirer {
	t := ls.t
	return AcquirerFunc(func(ctx context.Context, session, owner string) (Hold, error) {
		if err := ValidateSession(session); err != nil {
			return nil, err
		}
		if owner == "" {
			return nil, errors.New("stream: RecoveryHolds: empty owner")
		}
		tl, ok, err := t.Logs().lastMsg(ctx, session)
		if err != nil {
			return nil, err
		}
		lv, live, err := t.Logs().writerOf(ctx, session, tl, ok)
		if err != nil {
			return nil, err
		}
		if live {
			return nil, fmt.Errorf("%w: session %s is written by %q at epoch %d", ErrLeaseHeld, session, lv.Owner, lv.Epoch)
		}
		if tl.epoch >= schema.MaxEpoch {
			return nil, fmt.Errorf("%w: session %s is at epoch %d, the highest allowed is %d", ErrEpochExhausted, session, tl.epoch, uint64(schema.MaxEpoch))
		}
		return &fenceHold{session: session, owner: owner, epoch: tl.epoch + 1}, nil
	})
}

// fenceHold is RecoveryHolds's hold: good until released.
type fenceHold struct {
	session, owner string
	epoch          uint64
	guard          holdGuard // no clock: good until released
}

func (f *fenceHold) Session() string { return f.session }
func (f *fenceHold) Owner() string   { return f.owner }
func (f *fenceHold) Epoch() uint64   { return f.epoch }

func (f *fenceHold) Err() error     { return f.guard.Err() }
func (f *fenceHold) Lose(err error) { f.guard.Lose(err) }

func (f *fenceHold) Release(context.Context) error {
	f.Lose(errReleased)
	return nil
}
