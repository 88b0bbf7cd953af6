package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// PlanStore is what TakeOperation needs from jw_plans; *stream.Plans
// implements it.
type PlanStore interface {
	Get(ctx context.Context, planID string) (stream.PlanRecord, error)
	Consume(ctx context.Context, rec stream.PlanRecord, callID string, epoch uint64) (stream.PlanRecord, error)
	Complete(ctx context.Context, rec stream.PlanRecord, epoch uint64) (stream.PlanRecord, error)
}

// Attempt is the call a retry plan is presented for.
type Attempt struct {
	// Session is the session the attempt will be recorded in.
	Session string
	// Task is the attempt's task.
	Task string
	// Tool is the tool's name.
	Tool string
	// Arguments are the attempt's arguments; compared to the plan by
	// canonical digest (RFC 8785, numbers exact).
	Arguments json.RawMessage
	// Contract is the tool's contract as registered now.
	Contract effect.Contract
	// CallID is the new attempt's call id, recorded as the plan's consumer.
	CallID string
	// Planners are the public keys of the recovery workers whose plans are
	// accepted (recovery.VerifyPlan). Nil or empty trusts no one: every
	// plan is refused with plan_untrusted.
	Planners recovery.TrustedKeys
	// Epoch is the epoch of the writer that will record the attempt; it is
	// recorded with the consumption (0: unknown).
	Epoch uint64
	// MayComplete, when true, lets TakeOperation complete a plan consumed
	// by an older writer whose attempt never reached the log (see
	// stream.Plans.Complete). The caller sets it only when it knows, from
	// the history it loaded after fencing the session, that the log holds
	// no retry of the plan's prior call.
	MayComplete bool
	// Prior, when set, reads the event at a stream sequence of the
	// session log (stream.Log.EventAt): the plan must then retry the call
	// recorded at its prior_seq — that call's tool.call, with the plan's
	// tool, task, key, contract and canonical arguments — or it is refused
	// with plan_mismatch (field prior_call_id), so a trusted signature
	// alone cannot run an action that was never recorded, or a recorded
	// one with other arguments. Nil: not checked.
	Prior func(ctx context.Context, seq uint64) (schema.Event, bool, error)
}

// Taken is what TakeOperation grants: the operation the attempt records,
// and its call id — Attempt.CallID, or, when the plan is completed for
// an attempt an older writer consumed it for and never recorded, that
// attempt's call id.
type Taken struct {
	Operation schema.Operation
	CallID    string
	// Completed says the plan was consumed before, by the attempt CallID,
	// and is completed now.
	Completed bool
}

// TakeOperation verifies plan against the attempt and consumes it. The plan
// must have been issued in jw_plans and still be issued there, must equal
// the issued plan (signature included), must carry a signature that
// verifies against at.Planners (so a record written straight into
// jw_plans, or altered there, authorizes nothing), and must name the
// attempt's session, task and tool, the same canonical arguments and the
// tool's current contract, and (with at.Prior) retry the call recorded at
// its prior_seq; then it is
// consumed with a compare-and-set from issued to consumed, so of any number
// of concurrent takers in any number of processes exactly one succeeds. It
// returns the operation the attempt must record: the plan's task, key and
// contract, with a retry link to the prior call.
//
// A plan already consumed is refused (plan_consumed), except that with
// at.MayComplete a writer whose epoch is above the consumer's completes
// it: the consumer was fenced before its attempt reached the log, so the
// attempt is recorded now, once, under the call id it was consumed for
// (Taken.CallID, Taken.Completed; see stream.Plans.Complete).
//
// Errors are *schema.Error with code plan_not_issued, plan_consumed,
// plan_untrusted or plan_mismatch (Field names what differs); all match
// schema.ErrPlanRefused. A
// refused plan is left as it was; a consumed plan is spent for good, whatever
// happens to the attempt afterwards. Custom runtimes call TakeOperation
// before they record the attempt's tool.call.
func TakeOperation(ctx context.Context, plans PlanStore, at Attempt, plan schema.Plan) (Taken, error) {
	ctx, end := startPlanTakeSpan(ctx, plan)
	taken, err := takeOperation(ctx, plans, at, plan)
	end(taken, err)
	return taken, err
}

// takeOperation is TakeOperation without its span.
func takeOperation(ctx context.Context, plans PlanStore, at Attempt, plan schema.Plan) (Taken, error) {
	if plans == nil {
		return Taken{}, &schema.Error{Code: schema.CodePlanNotIssued, Message: "no plan store configured", Err: stream.ErrPlanNotIssued}
	}
	rec, err := plans.Get(ctx, plan.PlanID)
	if errors.Is(err, stream.ErrPlanNotIssued) {
		return Taken{}, &schema.Error{Code: schema.CodePlanNotIssued, Message: fmt.Sprintf("plan %q was not issued in jw_plans", plan.PlanID), Err: err}
	}
	if err != nil {
		return Taken{}, fmt.Errorf("worker: read plan %s: %w", plan.PlanID, err)
	}
	completing := rec.State == stream.PlanConsumed && at.MayComplete && at.Epoch > 0 &&
		rec.ConsumedEpoch > 0 && rec.ConsumedEpoch < at.Epoch && rec.CompletedEpoch < at.Epoch && rec.ConsumedBy != ""
	if rec.State != stream.PlanIssued && !completing {
		return Taken{}, consumedError(rec, nil)
	}
	issued := rec.Plan
	mismatch := func(field, format string, args ...any) error {
		return &schema.Error{Code: schema.CodePlanMismatch, Field: field, Message: fmt.Sprintf("plan %s: ", plan.PlanID) + fmt.Sprintf(format, args...)}
	}
	if !stream.SamePlan(issued, plan) || issued.Signer != plan.Signer || issued.Sig != plan.Sig {
		return Taken{}, mismatch("plan", "differs from the plan issued under this id")
	}
	if err := recovery.VerifyPlan(issued, at.Planners); err != nil {
		return Taken{}, &schema.Error{Code: schema.CodePlanUntrusted, Message: fmt.Sprintf("plan %s: %v", plan.PlanID, err), Err: err}
	}
	switch {
	case issued.Session != at.Session:
		return Taken{}, mismatch("session", "is for session %q, the call is in %q", issued.Session, at.Session)
	case issued.Task != at.Task:
		return Taken{}, mismatch("task", "is for task %q, the call is for %q", issued.Task, at.Task)
	case issued.Tool != at.Tool:
		return Taken{}, mismatch("tool", "is for tool %q, the call is to %q", issued.Tool, at.Tool)
	case issued.Contract != at.Contract:
		return Taken{}, mismatch("contract", "was prepared under contract %s, tool %s now declares %s", issued.Contract, at.Tool, at.Contract)
	case issued.Key == "" || len(issued.Key) > schema.MaxFieldBytes:
		return Taken{}, mismatch("key", "has no usable operation key")
	}
	own, err := schema.ArgsDigest(issued.Arguments)
	if err != nil || own != issued.ArgsDigest {
		return Taken{}, mismatch("arguments", "args_digest does not match its own arguments")
	}
	got, err := schema.ArgsDigest(at.Arguments)
	if err != nil {
		return Taken{}, mismatch("arguments", "call arguments cannot be canonicalized: %v", err)
	}
	if got != issued.ArgsDigest {
		return Taken{}, mismatch("arguments", "was prepared for other arguments (%s, the call has %s)", issued.ArgsDigest, got)
	}
	if at.Prior != nil {
		ev, ok, err := at.Prior(ctx, issued.PriorSeq)
		if err != nil {
			return Taken{}, fmt.Errorf("worker: read the prior call of plan %s: %w", plan.PlanID, err)
		}
		c := ev.Call
		same := ok && c != nil && c.Operation != nil && c.CallID == issued.PriorCallID && c.Tool == issued.Tool &&
			c.Operation.Task == issued.Task && c.Operation.Key == issued.Key && c.Operation.Contract == issued.Contract
		if same {
			d, err := schema.ArgsDigest(c.Arguments)
			same = err == nil && d == issued.ArgsDigest
		}
		if !same {
			return Taken{}, mismatch("prior_call_id", "seq %d of the log is not call %s with the plan's tool, task, key, contract and arguments", issued.PriorSeq, issued.PriorCallID)
		}
	}
	taken := Taken{CallID: at.CallID}
	if completing {
		// The consumer was fenced before it could record its attempt:
		// this writer records it, under the call id it was consumed for.
		if got, err := plans.Complete(ctx, rec, at.Epoch); err != nil {
			if errors.Is(err, stream.ErrPlanConsumed) {
				return Taken{}, consumedError(got, err)
			}
			return Taken{}, fmt.Errorf("worker: complete plan %s: %w", plan.PlanID, err)
		}
		taken.CallID, taken.Completed = rec.ConsumedBy, true
	} else if got, err := plans.Consume(ctx, rec, at.CallID, at.Epoch); err != nil {
		if errors.Is(err, stream.ErrPlanConsumed) {
			return Taken{}, consumedError(got, err) // got names the winner
		}
		return Taken{}, fmt.Errorf("worker: consume plan %s: %w", plan.PlanID, err)
	}
	taken.Operation = schema.Operation{
		Task:     issued.Task,
		Key:      issued.Key,
		Contract: at.Contract,
		Retry: &schema.RetryLink{
			PriorCallID: issued.PriorCallID,
			PriorSeq:    issued.PriorSeq,
			PlanID:      issued.PlanID,
			Basis:       issued.Basis,
			Review:      issued.Review,
			IssuedAt:    issued.IssuedAt,
			Signer:      issued.Signer,
			Sig:         issued.Sig,
		},
	}
	return taken, nil
}

func consumedError(rec stream.PlanRecord, cause error) error {
	if cause == nil {
		cause = stream.ErrPlanConsumed
	}
	msg := fmt.Sprintf("plan %s was already used", rec.Plan.PlanID)
	if rec.ConsumedBy != "" {
		msg += " by call " + rec.ConsumedBy
	}
	return &schema.Error{Code: schema.CodePlanConsumed, Message: msg, Err: cause}
}
