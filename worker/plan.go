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
	Consume(ctx context.Context, rec stream.PlanRecord, callID string) (stream.PlanRecord, error)
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
}

// TakeOperation verifies plan against the attempt and consumes it. The plan
// must have been issued in jw_plans and still be issued there, must equal
// the issued plan (signature included), must carry a signature that
// verifies against at.Planners (so a record written straight into
// jw_plans, or altered there, authorizes nothing), and must name the
// attempt's session, task and tool, the same canonical arguments and the
// tool's current contract; then it is
// consumed with a compare-and-set from issued to consumed, so of any number
// of concurrent takers in any number of processes exactly one succeeds. It
// returns the operation the attempt must record: the plan's task, key and
// contract, with a retry link to the prior call.
//
// Errors are *Error with code plan_not_issued, plan_consumed,
// plan_untrusted or plan_mismatch (Field names what differs); all match
// ErrPlanRefused. A
// refused plan is left as it was; a consumed plan is spent for good, whatever
// happens to the attempt afterwards. Custom runtimes call TakeOperation
// before they record the attempt's tool.call.
func TakeOperation(ctx context.Context, plans PlanStore, at Attempt, plan schema.Plan) (schema.Operation, error) {
	if plans == nil {
		return schema.Operation{}, &Error{Code: CodePlanNotIssued, Message: "no plan store configured", Err: stream.ErrPlanNotIssued}
	}
	rec, err := plans.Get(ctx, plan.PlanID)
	if errors.Is(err, stream.ErrPlanNotIssued) {
		return schema.Operation{}, &Error{Code: CodePlanNotIssued, Message: fmt.Sprintf("plan %q was not issued in jw_plans", plan.PlanID), Err: err}
	}
	if err != nil {
		return schema.Operation{}, fmt.Errorf("worker: read plan %s: %w", plan.PlanID, err)
	}
	if rec.State != stream.PlanIssued {
		return schema.Operation{}, consumedError(rec, nil)
	}
	issued := rec.Plan
	mismatch := func(field, format string, args ...any) error {
		return &Error{Code: CodePlanMismatch, Field: field, Message: fmt.Sprintf("plan %s: ", plan.PlanID) + fmt.Sprintf(format, args...)}
	}
	if !stream.SamePlan(issued, plan) || issued.Signer != plan.Signer || issued.Sig != plan.Sig {
		return schema.Operation{}, mismatch("plan", "differs from the plan issued under this id")
	}
	if err := recovery.VerifyPlan(issued, at.Planners); err != nil {
		return schema.Operation{}, &Error{Code: CodePlanUntrusted, Message: fmt.Sprintf("plan %s: %v", plan.PlanID, err), Err: err}
	}
	switch {
	case issued.Session != at.Session:
		return schema.Operation{}, mismatch("session", "is for session %q, the call is in %q", issued.Session, at.Session)
	case issued.Task != at.Task:
		return schema.Operation{}, mismatch("task", "is for task %q, the call is for %q", issued.Task, at.Task)
	case issued.Tool != at.Tool:
		return schema.Operation{}, mismatch("tool", "is for tool %q, the call is to %q", issued.Tool, at.Tool)
	case issued.Contract != at.Contract:
		return schema.Operation{}, mismatch("contract", "was prepared under contract %s, tool %s now declares %s", issued.Contract, at.Tool, at.Contract)
	case issued.Key == "" || len(issued.Key) > schema.MaxFieldBytes:
		return schema.Operation{}, mismatch("key", "has no usable operation key")
	}
	own, err := schema.ArgsDigest(issued.Arguments)
	if err != nil || own != issued.ArgsDigest {
		return schema.Operation{}, mismatch("arguments", "args_digest does not match its own arguments")
	}
	got, err := schema.ArgsDigest(at.Arguments)
	if err != nil {
		return schema.Operation{}, mismatch("arguments", "call arguments cannot be canonicalized: %v", err)
	}
	if got != issued.ArgsDigest {
		return schema.Operation{}, mismatch("arguments", "was prepared for other arguments (%s, the call has %s)", issued.ArgsDigest, got)
	}
	if got, err := plans.Consume(ctx, rec, at.CallID); err != nil {
		if errors.Is(err, stream.ErrPlanConsumed) {
			return schema.Operation{}, consumedError(got, err) // got names the winner
		}
		return schema.Operation{}, fmt.Errorf("worker: consume plan %s: %w", plan.PlanID, err)
	}
	return schema.Operation{
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
	}, nil
}

func consumedError(rec stream.PlanRecord, cause error) error {
	if cause == nil {
		cause = stream.ErrPlanConsumed
	}
	msg := fmt.Sprintf("plan %s was already used", rec.Plan.PlanID)
	if rec.ConsumedBy != "" {
		msg += " by call " + rec.ConsumedBy
	}
	return &Error{Code: CodePlanConsumed, Message: msg, Err: cause}
}
