package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// Plan states in the jw_plans bucket. A plan moves from PlanIssued to
// PlanConsumed exactly once and never back.
const (
	// PlanIssued means the plan may be used by one attempt.
	PlanIssued = "issued"
	// PlanConsumed means an attempt took the plan; it never works again.
	PlanConsumed = "consumed"
)

// Sentinel errors of the plan store; match them with errors.Is.
var (
	// ErrPlanNotIssued is returned when no plan with that id was issued in
	// jw_plans.
	ErrPlanNotIssued = errors.New("stream: plan not issued")
	// ErrPlanConsumed is returned when the plan was already used by an
	// attempt (in this or any other process).
	ErrPlanConsumed = errors.New("stream: plan already consumed")
	// ErrPlanConflict is returned by Issue when a different plan is already
	// stored under the same plan id.
	ErrPlanConflict = errors.New("stream: a different plan is stored under this plan id")
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
	// Revision is the KV revision the record was read at; not stored.
	Revision uint64 `json:"-"`
}

// Plans is the single-use plan store on the jw_plans bucket: issue with a KV
// create, consume with a compare-and-set from issued to consumed, so a plan
// is used at most once across goroutines and processes. Safe for concurrent
// use; the zero value is not usable, build it with NewPlans.
type Plans struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// NewPlans returns a plan store on kv (normally Topology.Plans).
func NewPlans(kv jetstream.KeyValue) *Plans {
	return &Plans{kv: kv, now: time.Now}
}

// Issue stores plan in state issued under its plan id. Issuing the same plan
// again is a no-op (plan ids are derived from session and prior call, so a
// re-issue is naturally deduplicated) and returns the stored record, whatever
// its state; a different plan under the same id is ErrPlanConflict.
func (p *Plans) Issue(ctx context.Context, plan schema.Plan) (PlanRecord, error) {
	if plan.PlanID == "" {
		return PlanRecord{}, fmt.Errorf("stream: issue plan: empty plan_id")
	}
	rec := PlanRecord{State: PlanIssued, Plan: plan}
	b, err := json.Marshal(rec)
	if err != nil {
		return PlanRecord{}, fmt.Errorf("stream: encode plan %s: %w", plan.PlanID, err)
	}
	rev, err := p.kv.Create(ctx, plan.PlanID, b)
	if err == nil {
		rec.Revision = rev
		return rec, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return PlanRecord{}, fmt.Errorf("stream: issue plan %s: %w", plan.PlanID, err)
	}
	have, err := p.Get(ctx, plan.PlanID)
	if err != nil {
		return PlanRecord{}, err
	}
	if !SamePlan(have.Plan, plan) {
		return have, fmt.Errorf("%w: %s", ErrPlanConflict, plan.PlanID)
	}
	return have, nil
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
	rec.Revision = e.Revision()
	return rec, nil
}

// Consume takes an issued plan for the attempt callID: a compare-and-set of
// the record read at rec.Revision from issued to consumed. It returns
// ErrPlanConsumed if the plan was consumed before or if another consumer won
// the race, and ErrPlanNotIssued if it does not exist. Exactly one of any
// number of concurrent Consume calls on one plan succeeds.
func (p *Plans) Consume(ctx context.Context, rec PlanRecord, callID string) (PlanRecord, error) {
	id := rec.Plan.PlanID
	for attempt := 0; ; attempt++ {
		if rec.State != PlanIssued {
			return rec, fmt.Errorf("%w: %s (by %s)", ErrPlanConsumed, id, rec.ConsumedBy)
		}
		next := rec
		next.State = PlanConsumed
		next.ConsumedBy = callID
		next.ConsumedAt = p.now().UTC()
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
// list it. A value that is not a plan record is skipped.
func (t *Topology) ListPlans(ctx context.Context, session string) ([]PlanRecord, error) {
	keys, err := BucketKeys(ctx, t.JS, t.Prefix+"_plans")
	if err != nil {
		return nil, err
	}
	p := NewPlans(t.Plans)
	out := []PlanRecord{}
	for _, k := range keys {
		rec, err := p.Get(ctx, k)
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
