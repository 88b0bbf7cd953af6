// Package worker runs tool calls the canonical way (DESIGN §6) and, in later
// files, hosts the tool worker and the recovery worker.
//
// # The canonical runtime
//
// A [Runtime] is one writer's runtime for one session log. Every call goes
// through the same steps:
//
//  1. (retry only) [TakeOperation] verifies the retry plan against the
//     session, task, tool, canonical arguments and the tool's current
//     contract, then consumes it in jw_plans with a compare-and-set from
//     issued to consumed. A consumed plan never works again, even if
//     admission then refuses the attempt.
//  2. A fresh call id; a fresh operation key for a new logical action, or the
//     plan's key for a retry.
//  3. tool.call is appended with the operation and start_marker: true, and
//     one tool_calls is counted in jw_budget (nothing is ever refunded).
//  4. Admission: permission → arguments (the tool's JSON Schema) → guard →
//     approval → budget. A refusal appends tool.result{status: rejected,
//     stage}.
//  5. tool.started is appended; only after it is acknowledged does the body
//     run, under the tool's timeout, the caller's cancellation and the
//     tool's output limit.
//  6. tool.result is appended with the status the body earned.
//
// A plan is not a permission and not a lock: every admission stage runs
// again for a retry.
//
// # Choices a host should know
//
//   - The jw_budget count runs alongside the tool.call append, so an attempt
//     whose tool.call cannot be written may still have been counted: counts
//     err on the high side, never the low one.
//   - Every write after the plan is taken runs under its own WriteTimeout,
//     detached from the caller's context, so a caller that goes away still
//     leaves a complete record. A caller gone before the body started is
//     refused at the stage that noticed; gone while the body ran, the result
//     is cancelled.
//   - A plan is spent before tool.call is written. If that write then fails
//     (log down, writer fenced), the plan is spent with no attempt to show
//     for it, and the prior call's successor plan id (derived from session
//     and prior call) is taken: the runtime logs plan_id and call_id at
//     error level, and an operator has to decide by hand.
//   - A body that ignores its context keeps running after its timeout
//     result is recorded; that is why timeout is an uncertain outcome.
//
// The body of a tool receives [BodyRequest.Operation] ({task, key,
// contract}); an idempotent tool deduplicates on task + key and must keep
// that record durably (see package tools for examples).
package worker
