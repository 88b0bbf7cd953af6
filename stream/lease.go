package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Leases is the handle on session and partition leases, worker
// registrations and takeovers. Get it with Topology.Leases.
type Leases struct{ t *Topology }

// LeaseValue is what a lease key holds (JSON): a session's lease, a
// partition's lease (AcquirePartition), or a tool worker's registration
// (RegisterWorker).
type LeaseValue struct {
	// Owner is the holder.
	Owner string `json:"owner"`
	// Epoch is the holder's writer epoch (0 for a registration).
	Epoch uint64 `json:"epoch"`
	// Base is, for a partition's lease, the epoch the partition was
	// acquired at; its Epoch may have been raised above it since
	// (PartitionHold.Raise). 0 otherwise.
	Base uint64 `json:"base,omitempty"`
	// At is when the value was written.
	At time.Time `json:"at"`
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
// leases) and the highest epoch on its log, stored back by compare-and-set
// (epochCounter).
func (ls Leases) nextEpoch(ctx context.Context, session string) (uint64, error) {
	t := ls.t
	c := epochCounter{kv: t.LeaseBucket, key: epochKey(session), what: "session " + session, step: 1}
	return c.draw(ctx, func(ctx context.Context) (uint64, error) {
		return t.Logs().HighestEpoch(ctx, session)
	})
}

// AcquireLease takes the session's lease for owner, with a new epoch higher
// than any before (see Lease.Epoch), for the topology's LeaseTTL. It returns
// ErrLeaseHeld (naming the holder) if the lease is live. The caller renews
// it well within the TTL and then, to take a session over, calls Fence with
// the lease's epoch.
func (ls Leases) AcquireLease(ctx context.Context, session, owner string) (*Lease, error) {
	t := ls.t
	if err := ValidateSession(session); err != nil {
		return nil, err
	}
	if owner == "" {
		return nil, errors.New("stream: AcquireLease: empty owner")
	}
	if held, err := t.LeaseBucket.Get(ctx, session); err == nil {
		return nil, heldError(session, held.Value())
	}
	epoch, err := ls.nextEpoch(ctx, session)
	if err != nil {
		return nil, err
	}
	rev, held, err := ls.createLease(ctx, session, LeaseValue{Owner: owner, Epoch: epoch, At: time.Now().UTC()})
	switch {
	case held != nil:
		return nil, heldError(session, held)
	case err != nil:
		return nil, fmt.Errorf("stream: acquire lease on %s: %w", session, err)
	}
	return &Lease{Session: session, Owner: owner, Epoch: epoch, t: t, rev: rev}, nil
}

// createLease creates the lease key with v and the lease TTL. A key held
// already returns its current value as held (non-nil, possibly empty when
// it could not be read); any other failure is err.
func (ls Leases) createLease(ctx context.Context, key string, v LeaseValue) (rev uint64, held []byte, err error) {
	t := ls.t
	val, _ := json.Marshal(v)
	rev, err = t.LeaseBucket.Create(ctx, key, val, jetstream.KeyTTL(t.cfg.LeaseTTL))
	if err == nil {
		return rev, nil, nil
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err) {
		held = []byte{}
		if e, gerr := t.LeaseBucket.Get(ctx, key); gerr == nil {
			held = e.Value()
		}
		return 0, held, err
	}
	return 0, nil, err
}

func heldError(session string, v []byte) error {
	var lv LeaseValue
	_ = json.Unmarshal(v, &lv)
	return fmt.Errorf("%w: session %s held by %q at epoch %d", ErrLeaseHeld, session, lv.Owner, lv.Epoch)
}

// LeaseHolder returns the live lease's value for the session, ok false if
// no lease is live.
//
// This is the session's own lease (AcquireLease), which a writer outside
// the tool workers' partitions holds; a tool worker owns a session
// through its partition's lease (PartitionHolder). Writer says whether
// anybody may still write the session.
func (ls Leases) LeaseHolder(ctx context.Context, session string) (LeaseValue, bool, error) {
	if err := ValidateSession(session); err != nil {
		return LeaseValue{}, false, err
	}
	return ls.leaseValue(ctx, session)
}

// leaseSubject is the KV subject of a key of jw_leases.
func (ls Leases) leaseSubject(key string) string {
	t := ls.t
	return "$KV." + t.Prefix + "_leases." + key
}

// leaseMsg is the message that writes v as key's value in jw_leases.
func (ls Leases) leaseMsg(key string, v LeaseValue) *nats.Msg {
	msg := nats.NewMsg(ls.leaseSubject(key))
	msg.Data, _ = json.Marshal(v)
	return msg
}

// rewriteLease publishes msg (leaseMsg) by compare-and-set on its key's
// last revision, rev, with the lease TTL from now: a renewal.
func (ls Leases) rewriteLease(ctx context.Context, msg *nats.Msg, rev uint64) (*jetstream.PubAck, error) {
	t := ls.t
	return t.JS.PublishMsg(ctx, msg,
		jetstream.WithExpectLastSequencePerSubject(rev),
		jetstream.WithMsgTTL(t.cfg.LeaseTTL))
}

// Renew extends the lease by the topology's LeaseTTL from now. It returns
// ErrLeaseLost if the lease expired or changed hands since its last write,
// and gives up on a server that does not answer within RequestTimeout (the
// caller renews again on its next tick, well within the TTL).
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	msg := l.t.Leases().leaseMsg(l.Session, LeaseValue{Owner: l.Owner, Epoch: l.Epoch, At: time.Now().UTC()})
	ctx, cancel := context.WithTimeout(ctx, l.t.cfg.RequestTimeout)
	defer cancel()
	ack, err := l.t.Leases().rewriteLease(ctx, msg, l.rev)
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
	err := l.t.LeaseBucket.Delete(ctx, l.Session, jetstream.LastRevision(l.rev))
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
func (ls Leases) WatchLeaseExpiry(ctx context.Context) (<-chan string, error) {
	t := ls.t
	// One token: lease keys only, not epoch.<session> or partition.<p>.
	return watchExpiry(ctx, t, ls.leaseSubject("*"), func(key string) (string, bool) {
		return key, key != ""
	})
}

// WatchPartitionExpiry reports partitions whose lease the server removed
// because its owner did not renew it in time (a tool worker that died or
// lost the server), from now on, as WatchLeaseExpiry does for sessions.
func (ls Leases) WatchPartitionExpiry(ctx context.Context) (<-chan int, error) {
	t := ls.t
	return watchExpiry(ctx, t, ls.leaseSubject("partition.*"), func(key string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimPrefix(key, "partition."))
		return n, err == nil
	})
}

// watchExpiry reports the keys of jw_leases matching filter whose entry
// the server removed for its TTL, mapped by key.
func watchExpiry[T any](ctx context.Context, t *Topology, filter string, key func(string) (T, bool)) (<-chan T, error) {
	cons, err := t.JS.OrderedConsumer(ctx, "KV_"+t.Prefix+"_leases", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		return nil, fmt.Errorf("stream: watch leases: %w", err)
	}
	// The heartbeat is sized from the lease TTL: a watcher whose consumer
	// sits on a node that died or was cut from the cluster hears nothing,
	// and the ordered consumer is recreated only after two missed
	// heartbeats — with nats.go's default (5 s) ten seconds in which no
	// expiry is reported, five lease TTLs of 2 s.
	hb := min(max(t.cfg.LeaseTTL/4, 500*time.Millisecond), 2*time.Second) // nats.go accepts 500 ms–30 s
	it, err := cons.Messages(jetstream.PullExpiry(max(5*time.Second, 4*hb)), jetstream.PullHeartbeat(hb))
	if err != nil {
		return nil, fmt.Errorf("stream: watch leases: %w", err)
	}
	pre := t.Leases().leaseSubject("")
	out := make(chan T, 64)
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
			k, ok := key(strings.TrimPrefix(m.Subject(), pre))
			if !ok {
				continue
			}
			select {
			case out <- k:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// liveLeases returns the live entries of jw_leases under filter (a
// subject of the bucket, wildcards allowed), by key, from one batched
// direct get of the last message of each key: entries whose last message
// is a delete or expiry marker are left out.
func (ls Leases) liveLeases(ctx context.Context, filter string) (map[string]LeaseValue, error) {
	t := ls.t
	ctx, cancel := context.WithTimeout(ctx, t.cfg.RequestTimeout)
	defer cancel()
	it, err := jetstreamext.GetLastMsgsFor(ctx, t.JS, "KV_"+t.Prefix+"_leases", []string{filter})
	if err != nil {
		return nil, fmt.Errorf("stream: list leases %s: %w", filter, err)
	}
	pre := ls.leaseSubject("")
	out := map[string]LeaseValue{}
	for m, err := range it {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("stream: list leases %s: %w", filter, err)
		}
		if m.Header.Get("Nats-Marker-Reason") != "" || m.Header.Get("KV-Operation") != "" || len(m.Data) == 0 {
			continue // deleted, purged or expired
		}
		var lv LeaseValue
		if json.Unmarshal(m.Data, &lv) != nil {
			continue
		}
		out[strings.TrimPrefix(m.Subject, pre)] = lv
	}
	return out, nil
}

// PartitionLeases returns the live partition leases, by partition, with
// one request.
func (ls Leases) PartitionLeases(ctx context.Context) (map[int]LeaseValue, error) {
	m, err := ls.liveLeases(ctx, ls.leaseSubject("partition.*"))
	if err != nil {
		return nil, err
	}
	out := make(map[int]LeaseValue, len(m))
	for k, lv := range m {
		if n, err := strconv.Atoi(strings.TrimPrefix(k, "partition.")); err == nil {
			out[n] = lv
		}
	}
	return out, nil
}

// Registration is a tool worker's entry in the registry of live workers:
// key worker.<owner> in jw_leases with the per-key TTL, which the worker
// renews (Renew) and the server removes one LeaseTTL after its last
// renewal. Workers size their share of the partitions by the live
// registrations (LiveWorkers). Safe for concurrent use.
type Registration struct {
	t     *Topology
	key   string
	owner string
}

// workerKey is the registry key of owner: worker.<owner>, with every
// character a KV key token cannot hold replaced by '_'.
func workerKey(owner string) string {
	b := []byte(owner)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return "worker." + string(b)
}

// RegisterWorker adds owner to the registry of live tool workers for the
// topology's LeaseTTL (renew it with Registration.Renew, remove it with
// Release). Registering again overwrites: a registration carries nothing
// but the owner.
func (ls Leases) RegisterWorker(ctx context.Context, owner string) (*Registration, error) {
	t := ls.t
	if owner == "" {
		return nil, errors.New("stream: RegisterWorker: empty owner")
	}
	r := &Registration{t: t, key: workerKey(owner), owner: owner}
	if err := r.Renew(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Renew writes the registration again with the TTL.
func (r *Registration) Renew(ctx context.Context) error {
	msg := r.t.Leases().leaseMsg(r.key, LeaseValue{Owner: r.owner, At: time.Now().UTC()})
	ctx, cancel := context.WithTimeout(ctx, r.t.cfg.RequestTimeout)
	defer cancel()
	if _, err := r.t.JS.PublishMsg(ctx, msg, jetstream.WithMsgTTL(r.t.cfg.LeaseTTL)); err != nil {
		return fmt.Errorf("stream: register worker %s: %w", r.owner, err)
	}
	return nil
}

// Release removes the registration (a delete marker).
func (r *Registration) Release(ctx context.Context) error {
	if err := r.t.LeaseBucket.Delete(ctx, r.key); err != nil {
		return fmt.Errorf("stream: unregister worker %s: %w", r.owner, err)
	}
	return nil
}

// LiveWorkers returns the owners of the live registrations, sorted, with
// one request.
func (ls Leases) LiveWorkers(ctx context.Context) ([]string, error) {
	m, err := ls.liveLeases(ctx, ls.leaseSubject("worker.*"))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(m))
	for _, lv := range m {
		out = append(out, lv.Owner)
	}
	slices.Sort(out)
	return out, nil
}
