package worker

import (
	"context"
	"encoding/json"

	"github.com/jingwei/jingwei/schema"
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
