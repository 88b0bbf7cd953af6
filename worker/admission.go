package worker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// Admission is what an admission hook sees of a call. The tool.call event is
// already recorded when hooks run.
type Admission struct {
	Session        string
	CallID         string
	Tool           string
	Arguments      json.RawMessage
	RequestID      string
	ProviderCallID string
	// Operation carries the task, key, contract and, for a retry, the link
	// to the prior attempt and the plan (basis, review).
	Operation schema.Operation
}

// Hook is one admission stage (permission, guard or approval). A non-nil
// error refuses the call at that stage: the runtime records
// tool.result{status: rejected, stage} with the error's text and the body
// never runs. Hooks run with the caller's context and must be safe for
// concurrent use.
type Hook interface {
	Admit(ctx context.Context, a Admission) error
}

// HookFunc adapts a function to Hook.
type HookFunc func(ctx context.Context, a Admission) error

// Admit calls f.
func (f HookFunc) Admit(ctx context.Context, a Admission) error { return f(ctx, a) }

// admit runs the admission stages in order and returns the refusing stage
// and why, or "" when the call is admitted; wants is wantsApproval of the
// call (decided once per call), which parks it at the approval stage
// (stageAwaiting).
//
// A count that failed for a transient reason (Transient) even after
// countNow's retries is returned as the error: it refuses nothing.
func (r *Runtime) admit(ctx context.Context, t *registered, a Admission, wants bool, usage func() (stream.Usage, error)) (schema.Stage, string, error) {
	hook := func(stage schema.Stage, h Hook) (schema.Stage, string) {
		if err := ctx.Err(); err != nil {
			return stage, "caller gone before " + string(stage) + ": " + err.Error()
		}
		if h == nil {
			return "", ""
		}
		if err := h.Admit(ctx, a); err != nil {
			return stage, err.Error()
		}
		return "", ""
	}
	if s, why := hook(schema.StagePermission, r.cfg.Permission); s != "" {
		return s, why, nil
	}
	if err := t.validate(a.Arguments); err != nil {
		return schema.StageArguments, "arguments do not match the input schema of " + t.Metadata.Name + ": " + err.Error(), nil
	}
	if s, why := hook(schema.StageGuard, r.cfg.Guard); s != "" {
		return s, why, nil
	}
	if s, why := hook(schema.StageApproval, r.cfg.Approval); s != "" {
		return s, why, nil
	}
	if wants {
		return stageAwaiting, "", nil // the budget stage runs once it is approved
	}
	u, countErr := usage() // the count was taken before or alongside the tool.call append (deferred: in memory)
	switch {
	case countErr != nil && Transient(countErr):
		return "", "", countErr
	case countErr != nil:
		return schema.StageBudget, "budget unavailable: " + countErr.Error(), nil
	case u.Over():
		return schema.StageBudget, fmt.Sprintf("tool_calls %d over the limit %d for task %s", u.ToolCalls, u.Limit, a.Operation.Task), nil
	case ctx.Err() != nil:
		return schema.StageBudget, "caller gone before the body started: " + ctx.Err().Error(), nil
	}
	return "", "", nil
}
