package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// LeaseValue is what the lease key holds (JSON).
type LeaseValue struct {
	Owner string    `json:"owner"`
	Epoch uint64    `json:"epoch"`
	At    time.Time `json:"at"`
}

// Lease is one owner's hold on one session, at one epoch. It lives for the
// topology's LeaseTTL after its last renewal; the server removes it then and
// tells WatchLeaseExpiry. Safe for concurrent use.
type Lease struct {
	// Session is the session the lease is for.
	Session string
	// Owner identifies the holder.
	Owner string
	// Epoch is the writer epoch that goes with the lease; it is higher than
	// every epoch any earlier lease of the session had and every epoch on
	// the session log.
	Epoch uint64

	t   *Topology
	mu  sync.Mutex
	rev uint64
}

// Revision returns the KV revision of the lease's latest write.
func (l *Lease) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

func epochKey(session string) string { return "epoch." + session }

// nextEpoch draws a new epoch for the session: one above both the session's
// epoch counter (key epoch.<session>, no TTL, so it outlives expired
// leases) and the highest epoch on its log, stored back by compare-and-set.
func (t *Topology) nextEpoch(ctx context.Context, session string) (uint64, error) {
	for {
		logEpoch, err := t.HighestEpoch(ctx, session)
		if err != nil {
			return 0, err
		}
		var cur, rev uint64
		e, err := t.Leases.Get(ctx, epochKey(session))
		switch {
		case err == nil:
			rev = e.Revision()
			cur, _ = strconv.ParseUint(string(e.Value()), 10, 64)
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			return 0, fmt.Errorf("stream: read epoch of %s: %w", session, err)
		}
		if max(cur, logEpoch) >= schema.MaxEpoch {
			// Only a corrupt log or counter gets here (epochs grow by one
			// per takeover): refuse instead of wrapping around.
			return 0, fmt.Errorf("%w: session %s is at epoch %d (log) / %d (counter), the highest allowed is %d", ErrEpochExhausted, session, logEpoch, cur, uint64(schema.MaxEpoch))
		}
		next := max(cur, logEpoch) + 1
		val := []byte(strconv.FormatUint(next, 10))
		if rev == 0 {
			_, err = t.Leases.Create(ctx, epochKey(session), val)
		} else {
			_, err = t.Leases.Update(ctx, epochKey(session), val, rev)
		}
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSeq(err) {
			return 0, fmt.Errorf("stream: store epoch of %s: %w", session, err)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}

// AcquireLease takes the session's lease for owner, with a new epoch higher
// than any before (see Lease.Epoch), for the topology's LeaseTTL. It returns
// ErrLeaseHeld (naming the holder) if the lease is live. The caller renews
// it well within the TTL and then, to take a session over, calls Fence with
// the lease's epoch.
func (t *Topology) AcquireLease(ctx context.Context, session, owner string) (*Lease, error) {
	if err := ValidateSession(session); err != nil {
		return nil, err
	}
	if owner == "" {
		return nil, errors.New("stream: AcquireLease: empty owner")
	}
	if held, err := t.Leases.Get(ctx, session); err == nil {
		return nil, heldError(session, held.Value())
	}
	epoch, err := t.nextEpoch(ctx, session)
	if err != nil {
		return nil, err
	}
	val, _ := json.Marshal(LeaseValue{Owner: owner, Epoch: epoch, At: time.Now().UTC()})
	rev, err := t.Leases.Create(ctx, session, val, jetstream.KeyTTL(t.cfg.LeaseTTL))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err) {
			var v []byte
			if e, gerr := t.Leases.Get(ctx, session); gerr == nil {
				v = e.Value()
			}
			return nil, heldError(session, v)
		}
		return nil, fmt.Errorf("stream: acquire lease on %s: %w", session, err)
	}
	return &Lease{Session: session, Owner: owner, Epoch: epoch, t: t, rev: rev}, nil
}

func heldError(session string, v []byte) error {
	var lv LeaseValue
	_ = json.Unmarshal(v, &lv)
	return fmt.Errorf("%w: session %s held by %q at epoch %d", ErrLeaseHeld, session, lv.Owner, lv.Epoch)
}

// LeaseHolder returns the live lease's value for the session, ok false if
// no lease is live.
func (t *Topology) LeaseHolder(ctx context.Context, session string) (LeaseValue, bool, error) {
	e, err := t.Leases.Get(ctx, session)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return LeaseValue{}, false, nil
	}
	if err != nil {
		return LeaseValue{}, false, fmt.Errorf("stream: read lease of %s: %w", session, err)
	}
	var lv LeaseValue
	if err := json.Unmarshal(e.Value(), &lv); err != nil {
		return LeaseValue{}, false, fmt.Errorf("stream: lease of %s: %w", session, err)
	}
	return lv, true, nil
}

func (t *Topology) leaseSubject(session string) string {
	return "$KV." + t.Prefix + "_leases." + session
}

// Renew extends the lease by the topology's LeaseTTL from now. It returns
// ErrLeaseLost if the lease expired or changed hands since its last write,
// and gives up on a server that does not answer within RequestTimeout (the
// caller renews again on its next tick, well within the TTL).
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	val, _ := json.Marshal(LeaseValue{Owner: l.Owner, Epoch: l.Epoch, At: time.Now().UTC()})
	msg := nats.NewMsg(l.t.leaseSubject(l.Session))
	msg.Data = val
	ctx, cancel := context.WithTimeout(ctx, l.t.cfg.RequestTimeout)
	defer cancel()
	ack, err := l.t.JS.PublishMsg(ctx, msg,
		jetstream.WithExpectLastSequencePerSubject(l.rev),
		jetstream.WithMsgTTL(l.t.cfg.LeaseTTL))
	if err != nil {
		if isWrongLastSeq(err) {
			return fmt.Errorf("%w: session %s (epoch %d)", ErrLeaseLost, l.Session, l.Epoch)
		}
		return fmt.Errorf("stream: renew lease on %s: %w", l.Session, err)
	}
	l.rev = ack.Sequence
	return nil
}

// Release gives the lease up (a delete marker, which watchers of expiry do
// not report). It returns ErrLeaseLost if the lease was no longer ours.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.t.Leases.Delete(ctx, l.Session, jetstream.LastRevision(l.rev))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err) {
			return fmt.Errorf("%w: session %s (epoch %d)", ErrLeaseLost, l.Session, l.Epoch)
		}
		return fmt.Errorf("stream: release lease on %s: %w", l.Session, err)
	}
	return nil
}

// WatchLeaseExpiry reports sessions whose lease the server removed because
// it was not renewed in time (the per-key TTL's marker), from now on. The
// channel is closed when ctx ends. Released leases are not reported. A
// process that was down while a lease expired missed it: reconcile with
// LeaseHolder on start.
func (t *Topology) WatchLeaseExpiry(ctx context.Context) (<-chan string, error) {
	cons, err := t.JS.OrderedConsumer(ctx, "KV_"+t.Prefix+"_leases", jetstream.OrderedConsumerConfig{
		// One token: lease keys only, not epoch.<session>.
		FilterSubjects: []string{t.leaseSubject("*")},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		return nil, fmt.Errorf("stream: watch leases: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("stream: watch leases: %w", err)
	}
	out := make(chan string, 64)
	go func() {
		defer close(out)
		defer it.Stop()
		for {
			m, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				if ctx.Err() == nil {
					t.log.Error().Err(err).Msg("lease watcher stopped")
				}
				return
			}
			h := m.Headers()
			if h.Get("Nats-Marker-Reason") == "" && h.Get("KV-Operation") != "PURGE" {
				continue
			}
			select {
			case out <- SessionOf(m.Subject()[1:]):
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
