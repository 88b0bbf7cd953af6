package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// Plan states in the jw_plans bucket. A plan moves from PlanIssued to
// PlanConsumed exactly once and never back. A consumed plan names the call
// id it was consumed for and the epoch of the writer that consumed it; if
// that attempt's tool.call never reached the session log, the session's
// next owner (a writer with a higher epoch, which fenced the consumer)
// completes the attempt once, under that same call id (Complete): the log,
// which then holds the call, refuses any further attempt of the plan.
const (
	// PlanIssued means the plan may be used by one attempt.
	PlanIssued = "issued"
	// PlanConsumed means an attempt took the plan; it never works again.
	PlanConsumed = "consumed"
)

// PlanRecord is the value stored under a plan id in jw_plans.
type PlanRecord struct {
	// State is PlanIssued or PlanConsumed.
	State string `json:"state"`
	// Plan is the plan exactly as issued.
	Plan schema.Plan `json:"plan"`
	// ConsumedBy is the call id of the attempt that took the plan (empty
	// while issued).
	ConsumedBy string `json:"consumed_by,omitempty"`
	// ConsumedAt is when the plan was taken (zero while issued).
	ConsumedAt time.Time `json:"consumed_at,omitzero"`
	// ConsumedEpoch is the epoch of the writer that consumed the plan (0
	// while issued, and for plans consumed before it was recorded).
	ConsumedEpoch uint64 `json:"consumed_epoch,omitempty"`
	// CompletedEpoch, when set, is the epoch of the later owner that
	// completed the attempt the consumer could not record (Complete).
	CompletedEpoch uint64 `json:"completed_epoch,omitempty"`
	// Revision is the KV revision the record was read at; not stored.
	Revision uint64 `json:"-"`
	// StoredAt is when the server stored the record at Revision (its
	// clock), as Get read it; zero when Issue stored the record itself.
	// Not stored.
	StoredAt time.Time `json:"-"`
	// Created is set by Issue when its own KV create stored the record
	// (nothing can have used or published the plan before); not stored.
	Created bool `json:"-"`
}

// Plans is the single-use plan store on the jw_plans bucket: issue with a KV
// create, consume with a compare-and-set from issued to consumed, so a plan
// is used at most once across goroutines and processes. Safe for concurrent
// use; the zero value is not usable, build it with NewPlans.
type Plans struct {
	kv  jetstream.KeyValue
	now func() time.Time
	t   *Topology // nil from NewPlans: only Topology.Plans lists and loads
}

// NewPlans returns a plan store on kv (normally Topology.PlanBucket) that
// issues, gets, consumes and completes plans; the one Topology.Plans
// returns also lists them and loads histories for them.
func NewPlans(kv jetstream.KeyValue) *Plans {
	return &Plans{kv: kv, now: time.Now}
}

// Issue stores plan in state issued under its plan id. Issuing the same plan
// again is a no-op (plan ids are derived from session and prior call, so a
// re-issue is naturally deduplicated) and returns the stored record, whatever
// its state; a different plan under the same id is ErrPlanConflict, with
// the stored record. The record has Created set when this Issue stored it.
//
// The create is a KV update expecting revision 0 (the key holds nothing);
// when it loses, one KV get reads the stored record, which is both the
// answer and the check jetstream's KeyValue.Create makes with a get of
// its own (a delete or purge marker under the key): only when that get
// finds no record does Issue fall back to KeyValue.Create, which creates
// over such a marker. A racing loser so costs one request less than
// Create and a Get.
func (p *Plans) Issue(ctx context.Context, plan schema.Plan) (PlanRecord, error) {
	if plan.PlanID == "" {
		return PlanRecord{}, fmt.Errorf("stream: issue plan: empty plan_id")
	}
	rec := PlanRecord{State: PlanIssued, Plan: plan}
	b, err := json.Marshal(rec)
	if err != nil {
		return PlanRecord{}, fmt.Errorf("stream: encode plan %s: %w", plan.PlanID, err)
	}
	rev, err := p.kv.Update(ctx, plan.PlanID, b, 0)
	if err == nil {
		rec.Revision, rec.Created = rev, true
		return rec, nil
	}
	if !keyTaken(err) {
		return PlanRecord{}, fmt.Errorf("stream: issue plan %s: %w", plan.PlanID, err)
	}
	have, err := p.Get(ctx, plan.PlanID)
	if errors.Is(err, ErrPlanNotIssued) {
		// A delete or purge marker (or a replica that does not show the
		// record yet): KeyValue.Create tells them apart.
		rev, err := p.kv.Create(ctx, plan.PlanID, b)
		if err == nil {
			rec.Revision, rec.Created = rev, true
			return rec, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return PlanRecord{}, fmt.Errorf("stream: issue plan %s: %w", plan.PlanID, err)
		}
		have, err = p.Get(ctx, plan.PlanID)
	}
	if err != nil {
		return PlanRecord{}, err
	}
	if !SamePlan(have.Plan, plan) {
		return have, fmt.Errorf("%w: %s", ErrPlanConflict, plan.PlanID)
	}
	return have, nil
}

// keyTaken reports a KV write refused because the key's last revision is
// not the one expected (here: the key holds something).
func keyTaken(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || planCASConflict(err)
}

// Get returns the stored record of a plan, or ErrPlanNotIssued.
func (p *Plans) Get(ctx context.Context, planID string) (PlanRecord, error) {
	if planID == "" {
		return PlanRecord{}, fmt.Errorf("%w: empty plan_id", ErrPlanNotIssued)
	}
	e, err := p.kv.Get(ctx, planID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return PlanRecord{}, fmt.Errorf("%w: %s", ErrPlanNotIssued, planID)
	}
	if err != nil {
		return PlanRecord{}, fmt.Errorf("stream: get plan %s: %w", planID, err)
	}
	var rec PlanRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return PlanRecord{}, fmt.Errorf("stream: decode plan %s: %w", planID, err)
	}
	rec.Revision, rec.StoredAt = e.Revision(), e.Created()
	return rec, nil
}

// Consume takes an issued plan for the attempt callID of a writer at
// epoch: a compare-and-set of the record read at rec.Revision from issued
// to consumed. It returns
// ErrPlanConsumed if the plan was consumed before or if another consumer won
// the race, and ErrPlanNotIssued if it does not exist. Exactly one of any
// number of concurrent Consume calls on one plan succeeds.
func (p *Plans) Consume(ctx context.Context, rec PlanRecord, callID string, epoch uint64) (PlanRecord, error) {
	id := rec.Plan.PlanID
	for attempt := 0; ; attempt++ {
		if rec.State != PlanIssued {
			return rec, fmt.Errorf("%w: %s (by %s)", ErrPlanConsumed, id, rec.ConsumedBy)
		}
		next := rec
		next.State = PlanConsumed
		next.ConsumedBy = callID
		next.ConsumedAt = p.now().UTC()
		next.ConsumedEpoch = epoch
		b, err := json.Marshal(next)
		if err != nil {
			return rec, fmt.Errorf("stream: encode plan %s: %w", id, err)
		}
		rev, err := p.kv.Update(ctx, id, b, rec.Revision)
		if err == nil {
			next.Revision = rev
			return next, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !planCASConflict(err) {
			return rec, fmt.Errorf("stream: consume plan %s: %w", id, err)
		}
		// The record moved since it was read: the only move from issued is
		// to consumed. Re-read; if it is still issued the mismatch was
		// spurious (R3 under load) and the compare-and-set is tried again
		// from the fresh revision.
		have, gerr := p.Get(ctx, id)
		if gerr != nil {
			return rec, gerr
		}
		if have.State == PlanIssued && attempt >= maxPlanCASAttempts {
			return have, fmt.Errorf("stream: consume plan %s: revision kept moving: %w", id, err)
		}
		rec = have
	}
}

// Complete records, with a compare-and-set on the record read at
// rec.Revision, that a writer at epoch completes the attempt a consumed
// plan was consumed for (rec.ConsumedBy) because that attempt never
// reached the session log. Only a writer whose epoch is above the
// consumer's may (it fenced the consumer, so the consumer can no longer
// record the attempt itself); the caller must have checked, in the
// history it loaded after its fence, that the log holds no retry of the
// plan's prior call. A record that is not consumed, or whose consumer
// epoch is unknown or not below epoch, is ErrPlanConsumed; one completed
// since by a writer at epoch or above, too.
func (p *Plans) Complete(ctx context.Context, rec PlanRecord, epoch uint64) (PlanRecord, error) {
	id := rec.Plan.PlanID
	if rec.State != PlanConsumed || rec.ConsumedEpoch == 0 || rec.ConsumedEpoch >= epoch || rec.CompletedEpoch >= epoch {
		return rec, fmt.Errorf("%w: %s (by %s at epoch %d)", ErrPlanConsumed, id, rec.ConsumedBy, rec.ConsumedEpoch)
	}
	next := rec
	next.CompletedEpoch = epoch
	b, err := json.Marshal(next)
	if err != nil {
		return rec, fmt.Errorf("stream: encode plan %s: %w", id, err)
	}
	rev, err := p.kv.Update(ctx, id, b, rec.Revision)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || planCASConflict(err) {
			return rec, fmt.Errorf("%w: %s changed while it was being completed", ErrPlanConsumed, id)
		}
		return rec, fmt.Errorf("stream: complete plan %s: %w", id, err)
	}
	next.Revision = rev
	return next, nil
}

// maxPlanCASAttempts bounds the retries of a spurious CAS mismatch.
const maxPlanCASAttempts = 5

// SamePlan reports whether a and b describe the same permission: equal plan
// id, session, task, tool, argument digest, contract, key, prior call and
// sequence, and basis. IssuedAt, the argument bytes' formatting and the
// review are not compared.
func SamePlan(a, b schema.Plan) bool {
	return a.PlanID == b.PlanID && a.Session == b.Session && a.Task == b.Task &&
		a.Tool == b.Tool && a.ArgsDigest == b.ArgsDigest && a.Contract == b.Contract &&
		a.Key == b.Key && a.PriorCallID == b.PriorCallID && a.PriorSeq == b.PriorSeq &&
		a.Basis == b.Basis
}

// planCASConflict reports a JetStream "wrong last sequence" API error
// (10071, or 10164 on a replicated stream with a write in flight).
func planCASConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == 10071 || apiErr.ErrorCode == 10164
	}
	return false
}

// ListPlans returns every plan record in the jw_plans bucket, of one
// session or (session "") of all, newest first (by KV revision). It lists
// the keys from the bucket's stream info (BucketKeys) and reads each with
// a KV get, so it needs no consumer: any role that may read jw_plans can
// list it. A value that is not a plan record is skipped. Each get is
// bounded to a second and tried again while it fails transiently
// (lookupRetrying).
func (p *Plans) ListPlans(ctx context.Context, session string) ([]PlanRecord, error) {
	t := p.t
	keys, err := BucketKeys(ctx, t.JS, t.Prefix+"_plans")
	if err != nil {
		return nil, err
	}
	out := []PlanRecord{}
	for _, k := range keys {
		// Each get is bounded and tried again in place like a lookup at
		// open: a get sent while jw_plans elects a leader is never
		// answered, and a recovery worker starting then (status and the
		// awaiting-review rebuild list the plans) waited the whole
		// request timeout after the leader came back.
		rec, err := lookupRetrying(ctx, func(ctx context.Context) (PlanRecord, error) { return p.Get(ctx, k) })
		if errors.Is(err, ErrPlanNotIssued) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				continue // not a plan record; nothing of ours
			}
			return nil, err
		}
		if session != "" && rec.Plan.Session != session {
			continue
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b PlanRecord) int { return compareDesc(a.Revision, b.Revision) })
	return out, nil
}

// compareDesc orders a before b when a is larger.
func compareDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// PlanAgainID returns the Nats-Msg-Id of a publication of planID again,
// after its publication at stream sequence seq was acknowledged by the
// tool workers' plan consumer without the plan being used: racing
// publishers of the same re-publication make one message.
func PlanAgainID(planID string, seq uint64) string { return fmt.Sprintf("%s/again/%d", planID, seq) }

// isPlanMsg reports whether a JW_PLANS message carries planID (its first
// publication or one again).
func isPlanMsg(m *jetstream.RawStreamMsg, planID string) bool {
	id := m.Header.Get(jetstream.MsgIDHeader)
	return id == planID || strings.HasPrefix(id, planID+"/again/")
}

// PlanMessage returns the stream sequence of the latest message of the
// session's plans (stored on jw.plans.<partition>.<session>) that carries
// the plan planID (Msg-Id planID, or PlanAgainID), 0 if JW_PLANS holds
// none. The subject's last message is looked at first (one direct get,
// which any replica may answer); only when it is another plan's is the
// subject read, as ReadSubject reads.
//
// A replica behind the leader can only make the answer older (0, or an
// earlier publication of the plan): what the caller publishes on that
// answer carries the Msg-Id of the publication it found missing
// (planID, or PlanAgainID of the one it found), and the server drops it
// as a duplicate of the message the replica did not show yet, which is
// younger than the replica's lag.
func (p *Plans) PlanMessage(ctx context.Context, session, planID string) (uint64, error) {
	t := p.t
	subj := t.Names().PlansStoredSubject(session)
	last, err := t.PlanLog.GetLastMsgForSubject(ctx, subj)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("stream: read %s: %w", subj, err)
	case isPlanMsg(last, planID):
		return last.Sequence, nil
	}
	var seq uint64
	err = t.Reader().readRange(ctx, t.PlanLog.CachedInfo().Config.Name, subj, 1, last.Sequence, func(m *jetstream.RawStreamMsg) error {
		if isPlanMsg(m, planID) {
			seq = m.Sequence
		}
		return nil
	})
	return seq, err
}

// PlanConsumerAckFloor returns the stream sequence up to which the plan
// consumer of the session's partition (PlanConsumerName), held by the
// partition's owner, has acknowledged or terminated every plan message;
// ok is false when no tool worker created it yet (the first one reads
// every plan of the partition).
func (p *Plans) PlanConsumerAckFloor(ctx context.Context, session string) (floor uint64, ok bool, err error) {
	t := p.t
	// One consumer-info request, of whose answer only the ack floor (or
	// the error) is decoded: jetstream.Stream.Consumer decodes the whole
	// consumer info and builds a consumer handle, for every repeat
	// prepare.
	subj := t.Reader().apiPrefix() + "CONSUMER.INFO." + t.PlanLog.CachedInfo().Config.Name + "." + t.Names().PlanConsumerName(t.Names().PartitionOf(session))
	var resp *nats.Msg
	if _, has := ctx.Deadline(); has {
		resp, err = t.JS.Conn().RequestWithContext(ctx, subj, nil)
	} else {
		resp, err = t.JS.Conn().Request(subj, nil, t.cfg.RequestTimeout)
	}
	if err != nil {
		return 0, false, fmt.Errorf("stream: plan consumer: %w", err)
	}
	var info ackFloorInfo
	if err := jsonv2.Unmarshal(resp.Data, &info); err != nil {
		return 0, false, fmt.Errorf("stream: plan consumer: %w", err)
	}
	switch {
	case info.Error != nil && info.Error.ErrorCode == jetstream.JSErrCodeConsumerNotFound:
		return 0, false, nil
	case info.Error != nil:
		return 0, false, fmt.Errorf("stream: plan consumer: %w", info.Error)
	case info.Name == "":
		return 0, false, fmt.Errorf("stream: plan consumer: an answer without consumer info")
	}
	return info.AckFloor.Stream, true, nil
}

// ackFloorInfo is the part of a consumer-info answer
// PlanConsumerAckFloor reads.
type ackFloorInfo struct {
	Error    *jetstream.APIError `json:"error,omitempty"`
	Name     string              `json:"name"`
	AckFloor struct {
		Stream uint64 `json:"stream_seq"`
	} `json:"ack_floor"`
}
