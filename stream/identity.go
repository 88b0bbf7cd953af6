package stream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// Stream identity (docs/protocol.md §3 "Protected streams"). A stream that
// is deleted and created again under its name, or that loses messages
// from its start, forgets what recovery relies on: a completed review, a
// consumed plan, the calls of a session. Nothing in the new stream says
// so, and every role reads it as it reads the old one. So setup records
// the identity of each protected stream — the time the server created it
// and the first sequence it still holds — in the metadata of a stream of
// its own, <PREFIX>_IDENTITY, which only the admin role may create or
// update (every other role may only read stream info); CheckIdentity
// compares the streams with the record, and ConfirmIdentity records a
// replaced stream's new identity once an operator has looked at it.

// Metadata keys of the identity record: one of each per protected stream.
const (
	// MetaCreatedPrefix + stream name: when the server created the stream
	// (RFC 3339 with nanoseconds, UTC).
	MetaCreatedPrefix = "jingwei.created."
	// MetaFirstSeqPrefix + stream name: the first sequence the stream
	// held when its identity was recorded; one that holds a later first
	// sequence lost messages from its start (streams only: a bucket keeps
	// one revision per key, so its first sequence moves by design).
	MetaFirstSeqPrefix = "jingwei.first_seq."
)

// IdentityStreamName returns the name of the stream whose metadata holds
// the identity record: <PREFIX>_IDENTITY (DefaultPrefix when prefix is "").
func IdentityStreamName(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return streamName(prefix, "IDENTITY")
}

// ProtectedStreams returns the streams whose identity is recorded and
// checked, in a fixed order: the session logs, the reviews, the plan log,
// the assessments, the approvals and task stops, and the streams of the
// plans and budget buckets. The request queue, the answers and the leases
// are not among them: their messages leave by design, and losing them
// loses no fact recovery decides from.
func ProtectedStreams(prefix string) []string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return []string{
		streamName(prefix, "EVENTS"), streamName(prefix, "REVIEWS"), streamName(prefix, "PLANS"),
		streamName(prefix, "ASSESSMENTS"), streamName(prefix, "APPROVALS"),
		"KV_" + prefix + "_plans", "KV_" + prefix + "_budget",
	}
}

// StreamIdentity is what identifies one protected stream.
type StreamIdentity struct {
	// Stream is the stream's name.
	Stream string `json:"stream"`
	// Created is when the server created the stream.
	Created time.Time `json:"created"`
	// FirstSeq is the first sequence the stream holds (0 for a bucket's
	// stream, whose first sequence is not checked).
	FirstSeq uint64 `json:"first_seq,omitempty"`
}

// IdentityProblem is a protected stream that is not the one recorded.
type IdentityProblem struct {
	// Stream is the stream's name.
	Stream string `json:"stream"`
	// Reason says what differs, with both values.
	Reason string `json:"reason"`
}

func (p IdentityProblem) String() string { return p.Stream + ": " + p.Reason }

// ReplacedError returns the stream_replaced *schema.Error that names every
// problem and the command that confirms them, or nil when there is none.
func ReplacedError(problems []IdentityProblem) error {
	if len(problems) == 0 {
		return nil
	}
	parts := make([]string, len(problems))
	names := make([]string, len(problems))
	for i, p := range problems {
		parts[i], names[i] = p.String(), p.Stream
	}
	return schema.Errorf(schema.CodeStreamReplaced, "protected stream lost its history since setup recorded its identity (%s): nothing is planned or taken over until an operator who has checked it runs `jingwei setup --confirm-replaced %s`",
		strings.Join(parts, "; "), strings.Join(names, ","))
}

// isBucket reports whether name is a bucket's stream.
func isBucket(name string) bool { return strings.HasPrefix(name, "KV_") }

// identityOf reads the identity of stream name (ErrStreamNotFound wrapped
// when it does not exist).
func identityOf(ctx context.Context, js jetstream.JetStream, name string) (StreamIdentity, error) {
	s, err := lookupRetrying(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, name) })
	if err != nil {
		return StreamIdentity{}, fmt.Errorf("stream: identity of %s: %w", name, err)
	}
	info := s.CachedInfo()
	id := StreamIdentity{Stream: name, Created: info.Created.UTC()}
	if !isBucket(name) {
		id.FirstSeq = max(info.State.FirstSeq, 1)
	}
	return id, nil
}

// readRecord returns the identity record's metadata (ErrStreamNotFound
// wrapped when the record's stream does not exist).
func readRecord(ctx context.Context, js jetstream.JetStream, prefix string) (jetstream.Stream, map[string]string, error) {
	name := IdentityStreamName(prefix)
	s, err := lookupRetrying(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, name) })
	if err != nil {
		return nil, nil, fmt.Errorf("stream: identity record %s: %w", name, err)
	}
	return s, s.CachedInfo().Config.Metadata, nil
}

// IdentityRecord is the identity record as read: the recorded identity
// of each protected stream. The zero value is no record (every stream is
// a problem).
type IdentityRecord struct {
	prefix string
	meta   map[string]string
	found  bool
}

// ReadIdentityRecord reads the identity record of prefix (a missing record
// is not an error: its Check reports it). Needs only stream info.
func ReadIdentityRecord(ctx context.Context, js jetstream.JetStream, prefix string) (IdentityRecord, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	_, meta, err := readRecord(ctx, js, prefix)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return IdentityRecord{prefix: prefix}, nil
	}
	if err != nil {
		return IdentityRecord{}, err
	}
	return IdentityRecord{prefix: prefix, meta: meta, found: true}, nil
}

// CheckIdentity compares every protected stream of prefix with the
// identity record (ReadIdentityRecord, then IdentityRecord.Check).
func CheckIdentity(ctx context.Context, js jetstream.JetStream, prefix string) ([]IdentityProblem, error) {
	rec, err := ReadIdentityRecord(ctx, js, prefix)
	if err != nil {
		return nil, err
	}
	return rec.Check(ctx, js)
}

// Check compares the named protected streams (all of them when none is
// named) with the record and returns those that differ: created at
// another time than recorded (deleted and created again), holding a later
// first sequence than recorded (messages removed from its start), missing,
// or never recorded. No record at all is one problem, on the record's
// stream: run `jingwei setup`. The error is for a stream that could not be
// read (the server unreachable). One stream info request per stream, sent
// at once.
func (rec IdentityRecord) Check(ctx context.Context, js jetstream.JetStream, names ...string) ([]IdentityProblem, error) {
	if !rec.found {
		return []IdentityProblem{{Stream: IdentityStreamName(rec.prefix), Reason: "no identity record: `jingwei setup` (or `jingwei serve`) records it"}}, nil
	}
	if len(names) == 0 {
		names = ProtectedStreams(rec.prefix)
	}
	have := make([]StreamIdentity, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			have[i], errs[i] = identityOf(ctx, js, name)
		}()
	}
	wg.Wait()
	var out []IdentityProblem
	for i, name := range names {
		if errors.Is(errs[i], jetstream.ErrStreamNotFound) {
			out = append(out, IdentityProblem{Stream: name, Reason: "missing"})
			continue
		}
		if errs[i] != nil {
			return nil, errs[i]
		}
		if p, bad := compareIdentity(have[i], rec.meta); bad {
			out = append(out, p)
		}
	}
	return out, nil
}

// compareIdentity compares have with the record meta.
func compareIdentity(have StreamIdentity, meta map[string]string) (IdentityProblem, bool) {
	name := have.Stream
	rec, ok := meta[MetaCreatedPrefix+name]
	if !ok {
		return IdentityProblem{Stream: name, Reason: "its identity was never recorded"}, true
	}
	created, err := time.Parse(time.RFC3339Nano, rec)
	if err != nil {
		return IdentityProblem{Stream: name, Reason: fmt.Sprintf("recorded creation time %q is not RFC 3339", rec)}, true
	}
	if !created.Equal(have.Created) {
		return IdentityProblem{Stream: name, Reason: fmt.Sprintf("created %s, recorded %s: deleted and created again", have.Created.Format(time.RFC3339Nano), created.Format(time.RFC3339Nano))}, true
	}
	if have.FirstSeq == 0 {
		return IdentityProblem{}, false
	}
	floor, err := strconv.ParseUint(meta[MetaFirstSeqPrefix+name], 10, 64)
	if err != nil {
		floor = 1
	}
	if have.FirstSeq > max(floor, 1) {
		return IdentityProblem{Stream: name, Reason: fmt.Sprintf("first sequence %d, recorded %d: messages were removed from its start", have.FirstSeq, max(floor, 1))}, true
	}
	return IdentityProblem{}, false
}

// RecordIdentity makes sure the identity record of prefix exists and
// holds an entry for every protected stream: it creates the record's
// stream (with replicas replicas) if missing and records each stream that
// has no entry yet as it is now. An entry already recorded is never
// changed (a stream created again since stays a problem for CheckIdentity
// until ConfirmIdentity). Needs the admin role (stream create and update);
// EnsureTopology calls it.
func RecordIdentity(ctx context.Context, js jetstream.JetStream, prefix string, replicas int) error {
	_, err := recordIdentity(ctx, js, prefix, replicas, nil)
	return err
}

// ConfirmIdentity records the identity of the named protected streams as
// they are now, replacing what was recorded: an operator's statement that
// the replaced streams hold what recovery may act on. It returns the
// identities recorded. A name that is not an existing protected stream of
// prefix is an error. Needs the admin role.
func ConfirmIdentity(ctx context.Context, js jetstream.JetStream, prefix string, replicas int, streams ...string) ([]StreamIdentity, error) {
	protected := ProtectedStreams(prefix)
	confirm := map[string]bool{}
	for _, s := range streams {
		if !slices.Contains(protected, s) {
			return nil, fmt.Errorf("stream: confirm %q: not a protected stream (%s)", s, strings.Join(protected, ", "))
		}
		confirm[s] = true
	}
	return recordIdentity(ctx, js, prefix, replicas, confirm)
}

// recordIdentity records every protected stream without an entry, and
// those in confirm whatever their entry; it returns the identities of
// those in confirm.
func recordIdentity(ctx context.Context, js jetstream.JetStream, prefix string, replicas int, confirm map[string]bool) ([]StreamIdentity, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	for attempt := 0; ; attempt++ {
		s, meta, err := readRecord(ctx, js, prefix)
		if errors.Is(err, jetstream.ErrStreamNotFound) && attempt < 3 {
			_, err = js.CreateStream(ctx, jetstream.StreamConfig{
				Name:        IdentityStreamName(prefix),
				Description: "jingwei: the identity of each protected stream, in this stream's metadata (written by setup, checked by recovery)",
				Subjects:    []string{prefix + ".identity"},
				Storage:     jetstream.FileStorage,
				Replicas:    max(replicas, 1),
				MaxMsgs:     1,
				DenyDelete:  true,
				DenyPurge:   true,
			})
			if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return nil, fmt.Errorf("stream: create identity record %s: %w", IdentityStreamName(prefix), err)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		next := maps.Clone(meta)
		if next == nil {
			next = map[string]string{}
		}
		var confirmed []StreamIdentity
		changed := false
		for _, name := range ProtectedStreams(prefix) {
			if _, recorded := meta[MetaCreatedPrefix+name]; recorded && !confirm[name] {
				continue
			}
			id, err := identityOf(ctx, js, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) && !confirm[name] {
				continue // recorded once it exists
			}
			if err != nil {
				return nil, err
			}
			if confirm[name] {
				confirmed = append(confirmed, id)
			}
			next[MetaCreatedPrefix+name] = id.Created.Format(time.RFC3339Nano)
			if id.FirstSeq > 0 {
				next[MetaFirstSeqPrefix+name] = strconv.FormatUint(id.FirstSeq, 10)
			}
			changed = true
		}
		if !changed {
			return confirmed, nil
		}
		cfg := s.CachedInfo().Config
		cfg.Metadata = next
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			if attempt < 3 && ctx.Err() == nil {
				continue
			}
			return nil, fmt.Errorf("stream: update identity record %s: %w", IdentityStreamName(prefix), err)
		}
		return confirmed, nil
	}
}
