package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
)

// Body is a tool's implementation. It runs only after the call's
// tool.started event is acknowledged, under ctx, which carries the tool's
// timeout and the caller's cancellation. It returns the output as JSON (nil
// means no output) or an error; wrap the error with Retryable or
// BudgetExhausted to say more than "failed".
type Body func(ctx context.Context, req BodyRequest) (json.RawMessage, error)

// Operation is what a body needs to keep its promise: an idempotent tool
// deduplicates on Task + Key and rejects the same key with other arguments.
// A body deliberately cannot tell a first attempt from a retry.
type Operation struct {
	Task     string          `json:"task"`
	Key      string          `json:"key"`
	Contract effect.Contract `json:"contract"`
}

// BodyRequest is the input of a Body.
type BodyRequest struct {
	// Session is the session the call belongs to.
	Session string
	// CallID is this attempt's id (new on every attempt; never dedupe on it).
	CallID string
	// Tool is the tool's name.
	Tool string
	// Arguments are the call's arguments, already validated against the
	// tool's input schema.
	Arguments json.RawMessage
	// Operation is {task, key, contract}: stable across retries.
	Operation Operation
	// Fence is the call's fencing token (session, epoch, call id, operation
	// key); the body's context carries it too (FencingToken). A body whose
	// store can make a write conditional on it should (package
	// worker/fence), so that a writer fenced while its body ran cannot land
	// its side effect after a newer writer's.
	Fence Fence
}

// Tool is a tool as registered with the runtime.
type Tool struct {
	// Metadata names the tool and declares its contract, e.g.
	// effect.Metadata{Name: "orders.create"}.WithEffect(effect.Idempotent, "orders-v1").
	// Name and a valid Contract are required.
	Metadata effect.Metadata
	// InputSchema is a JSON Schema (draft 2020-12 unless it says otherwise)
	// the arguments must satisfy at admission stage "arguments". Nil accepts
	// any JSON value.
	InputSchema json.RawMessage
	// Timeout bounds one run of the body. Zero means Config.DefaultTimeout.
	// When it passes the result is recorded as timeout at once; a body that
	// ignores its ctx keeps running in the background (the timeout result
	// is uncertain for exactly that reason).
	Timeout time.Duration
	// OutputLimit is the largest output in bytes; a larger output is
	// recorded as output_limit and not stored. Zero means
	// Config.DefaultOutputLimit.
	OutputLimit int
	// CheckArguments, when set, runs at admission stage "arguments" after
	// the input schema passed: it refuses arguments the schema accepts but
	// the body cannot represent (an integer beyond int64, 100.0 where an
	// integer is read), so they are rejected before anything starts rather
	// than failing inside the body (an uncertain call that needs a review
	// for nothing). Nil checks nothing more.
	CheckArguments func(args json.RawMessage) error
	// Approval, when set, makes the tool's calls (all, or those its When
	// selects) wait for a signed approval at admission stage approval
	// (approval.go). Nil: no approval beyond Config.Approval's hook.
	Approval *ApprovalRule
	// Body runs the tool. Required.
	Body Body
}

// registered is a tool with its compiled schema.
type registered struct {
	Tool
	schema *jsonschema.Schema
	// startSpan and runSpan name the spans of the tool's calls.
	startSpan, runSpan string
}

// validate checks args against the tool's schema.
func (r *registered) validate(args json.RawMessage) error {
	if r.schema != nil {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
		if err != nil {
			return err
		}
		if err := r.schema.Validate(inst); err != nil {
			return err
		}
	}
	if r.CheckArguments != nil {
		return r.CheckArguments(args)
	}
	return nil
}

// Registry holds the tools a runtime can call. Safe for concurrent use; the
// zero value is an empty registry ready to use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]*registered
}

// NewRegistry returns a registry holding tools; see Register.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{}
	for _, t := range tools {
		if err := r.Register(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds a tool. It fails with ErrInvalidTool for a tool without a
// name or body, an invalid contract or an input schema that does not
// compile, and with ErrDuplicateTool for a name already registered. To change
// a tool's contract, build a new registry (and bump the revision): plans
// issued against the old revision are then refused.
func (r *Registry) Register(t Tool) error {
	name := t.Metadata.Name
	if name == "" || len(name) > schema.MaxFieldBytes {
		return fmt.Errorf("%w: name %q must be 1-%d bytes", ErrInvalidTool, name, schema.MaxFieldBytes)
	}
	if t.Body == nil {
		return fmt.Errorf("%w: %s has no body", ErrInvalidTool, name)
	}
	if err := t.Metadata.Contract.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidTool, name, err)
	}
	if t.Timeout < 0 || t.OutputLimit < 0 {
		return fmt.Errorf("%w: %s: negative timeout or output limit", ErrInvalidTool, name)
	}
	reg := &registered{Tool: t, startSpan: tracing.StartToolCallName(name), runSpan: tracing.RunToolCallName(name)}
	if len(t.InputSchema) > 0 {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.InputSchema))
		if err != nil {
			return fmt.Errorf("%w: %s: input schema: %w", ErrInvalidTool, name, err)
		}
		c := jsonschema.NewCompiler()
		loc := "tool:///" + name + ".json"
		if err := c.AddResource(loc, doc); err != nil {
			return fmt.Errorf("%w: %s: input schema: %w", ErrInvalidTool, name, err)
		}
		if reg.schema, err = c.Compile(loc); err != nil {
			return fmt.Errorf("%w: %s: input schema: %w", ErrInvalidTool, name, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[name]; dup {
		return fmt.Errorf("%w: %s", ErrDuplicateTool, name)
	}
	if r.tools == nil {
		r.tools = make(map[string]*registered)
	}
	r.tools[name] = reg
	return nil
}

// Lookup returns the tool registered under name.
func (r *Registry) Lookup(name string) (Tool, bool) {
	t := r.lookup(name)
	if t == nil {
		return Tool{}, false
	}
	return t.Tool, true
}

func (r *Registry) lookup(name string) *registered {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.tools[name]
}

// Names returns the registered tool names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.tools))
	for n := range r.tools {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
