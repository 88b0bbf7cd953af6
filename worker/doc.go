// Package worker runs tool calls the canonical way (docs/protocol.md §8). Its
// subpackages are the processes built on it: worker/toolworker (the tool
// worker, which also serves jw.api.call), worker/recoverer (the recovery
// worker) and worker/service (the jw.api.* bodies, client and server
// helper).
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
// # Two appends when admission needs no wait
//
// When no admission stage has to wait — the tool's ApprovalRule does not
// select the call, and the task's count is deferred (see "The budget off
// the call path": a runtime that knows its history, a DeferringCounter, a
// task reconciled and without a limit) — steps 3 and 4 change places and
// steps 3 and 5 become one event: the call is counted in memory,
// admission runs, and an admitted call is recorded as one
// tool.call{started: true} (no start marker, docs/protocol.md §5), its
// body run only after that append is acknowledged, then tool.result: two
// appends. A refused call is recorded as today, tool.call with its start
// marker and tool.result{rejected, stage}. Every other call (a task's
// first call in this runtime, a task with a limit, a call that waits for
// approval, a runtime without a known history) keeps the three steps
// above. In the combined form the admission hooks run before the call is
// on the log, with the stop lock held: StopTask waits for them, so no
// task.stopped comes between the stop check and the tool.call; a slow hook
// delays a stop of its session.
//
// # Errors
//
// Every refusal and every result that is not ok is a *schema.Error with
// the runtime's codes (schema.CodeUnknownTool, schema.CodeInvalidCall, the
// plan_* codes, schema.CodeRejected with its Stage, the result statuses,
// schema.CodeFenced, schema.CodeLog); schema.ErrPlanRefused matches every
// plan refusal, and the cause (stream.ErrFenced, stream.ErrPlanConsumed)
// is reachable with errors.Is.
//
// # The log a host gives the runtime
//
// A host that embeds a Runtime takes its session over with
// stream.Leases.TakeOver and passes the takeover's Log (a
// stream.GuardedLog) as Config.Log and its History as Config.History: the
// guarded log refuses appends once the session's lease can no longer be
// trusted by the local clock, as the tool worker's do.
//
// # Choices a host should know
//
//   - A call is counted before its tool.call is appended (or alongside),
//     so an attempt whose tool.call cannot be written may still have been
//     counted: counts err on the high side, never the low one. See "The
//     budget off the call path" for when the count is written.
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
//   - A transient failure of jw_budget (a 503 while its stream elects a
//     leader, a request timeout, a reconnect; see Transient) is retried
//     with backoff for the call's WriteTimeout, counting the attempt once,
//     and never refuses the call. If it lasts longer, nothing more is
//     written: the call stays open with its start marker and no
//     tool.started (the body never ran), Call returns a log error, and the
//     session's next owner fences it: assessed not_started, retry_allowed.
//   - The body receives the call's fencing token (BodyRequest.Fence,
//     FencingToken): a tool whose store can make a write conditional on
//     it should (package worker/fence), so that a writer fenced while its
//     body ran — a process frozen past its lease — cannot land its side
//     effect after a newer writer's.
//   - A body that ignores its context keeps running after its timeout
//     result is recorded; that is why timeout is an uncertain outcome.
//
// # The budget off the call path
//
// Writing each count to jw_budget before the budget stage would make a
// fourth durable write per call, as dear as an append; so a runtime writes
// counts at once only where the count decides something, and defers the
// rest. The reasoning, step by step:
//
//   - A session has exactly one writer (fenced, docs/protocol.md §7), and its
//     jw_budget keys (<session>.<task>) count the attempts of that session
//     only: every recorded attempt is a tool.call event of the task in that
//     session's log. So the log itself is a lower bound of the true count,
//     and max(jw_budget, tool.call events of the task) never undercounts.
//   - A runtime that knows what its log held when it was opened
//     (Config.History, normally the confirmed history its owner loaded after
//     fencing; or an empty *stream.Log) reconciles each task once, before
//     its first count: stream.Budget.Reconcile raises the stored count to at
//     least the task's tool.call events in that history (a compare-and-set;
//     never lowered). Whatever a crashed predecessor counted only in memory
//     is thereby counted again from its recorded attempts.
//   - After that, a task whose counter has no limit is counted in memory
//     (stream.Budget.Defer) and written within the counter's FlushInterval
//     (50 ms by default), all counts deferred meanwhile in one
//     compare-and-set that adds them to the stored value (so counts from
//     other processes are never overwritten, and nothing is refunded). With
//     no limit the budget stage cannot refuse anything, so nothing is
//     decided on a count that is not yet written.
//   - A task with a limit, and every task of a runtime that does not know
//     its history (or whose counter is not a DeferringCounter), is counted
//     at once, alongside the tool.call append, together with any counts
//     still deferred for it; the budget stage waits for that write and
//     decides on the stored count, exact across processes.
//
// What a host should know: jw_budget as read by another process lags a
// live writer by up to FlushInterval for tasks without a limit (the
// writer's own stream.Budget.Get flushes first; Runtime.Flush writes
// everything, e.g. before handing a session over). A limit set on such a
// task by another process is learnt at the writer's next flush, so calls
// in that window are admitted (and counted). A writer that crashes loses
// its deferred counts from jw_budget until the next owner reconciles: a
// next owner must be given its History (an owner without it cannot
// reconcile and counts from jw_budget as it finds it). A fenced writer
// whose deferred counts land after the new owner reconciled counts those
// attempts twice: high, never low.
//
// # Approvals and stopped tasks
//
// A tool with an [ApprovalRule] (all its calls, or those its When
// selects) parks a call at the approval stage (docs/protocol.md §17): the
// runtime appends approval.requested with the deadline, publishes the
// request (Config.Approvals), and returns the call's Result with an
// approval_pending error; no goroutine waits for it. [Runtime.Resume]
// answers it with a signed approval or denial (checked against
// Config.TrustedApprovers, honoured once), [Runtime.Expire] ends the calls
// past their deadline, and [Runtime.NextDeadline] is the one timer a host
// needs. A runtime opened on a history (Config.History) waits again for
// the calls the history leaves waiting. [Runtime.StopTask] appends
// task.stopped: the task's new calls and plans are refused with
// task_stopped before anything is recorded or counted.
//
// The body of a tool receives [BodyRequest.Operation] ({task, key,
// contract}); an idempotent tool deduplicates on task + key and must keep
// that record durably (see package tools for examples).
package worker
