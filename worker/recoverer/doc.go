// Package recoverer is jingwei's recovery worker (docs/protocol.md §13) and the
// `jingwei` NATS micro service (jw.api.inspect, jw.api.prepare,
// jw.api.status; jw.api.call is served by the tool workers, see package
// service).
//
// It is the process; the decisions it acts on (classification, plans)
// are made by the pure functions of package recovery, the planner.
//
// # Parts
//
// A [Recoverer] is one type that composes small single-purpose services,
// the way riverqueue/river's maintainer composes its maintenance services;
// Run starts them in order and restarts each with backoff when it fails:
//
//   - the publisher (publish.go) puts assessments on
//     jw.assessments.<session>, async for the classifier, with a Msg-Id
//     for calls closed by a fence and after a load; the classifier's
//     assessments of results go out in batches, one message per session
//     and ack batch (batch.go, docs/protocol.md §5.4);
//   - the classifier (classify.go) consumes jw.events.> and keeps the open
//     calls (recovery.OpenCalls) to assess every call that finishes;
//   - the takeovers (takeover.go) watch the expiry of session and
//     partition leases and fence the sessions whose writer is gone
//     (stream.Leases.TakeOver with stream.Leases.RecoveryHolds), in
//     parallel on one bounded pool (Config.Parallelism), and reconcile at
//     start;
//   - the review checker (reviews.go) consumes jw.reviews.> and judges the
//     reviews of a call for prepare and status;
//   - the issuer (prepare.go) prepares plans from confirmed histories,
//     issues each exactly once, publishes what a crash left unpublished,
//     delivers again a plan whose message was lost, and runs the
//     auto-planner;
//   - the micro service (recoverer.go, serve) answers inspect, prepare,
//     status and history (history.go: a page of a session's log, for
//     readers without JetStream access) through service.Start.
//
// The public methods (Inspect, Prepare, Status, History, Reviews, TakeOver,
// Reconcile, RepairPlans, Stats) are the parts' entry points.
//
// # What it does
//
// A [Recoverer] consumes every session log (jw.events.>) with a durable
// consumer and publishes an assessment on jw.assessments.<session> for every
// call whose result arrives, and for every call a session.fenced closes. It
// fences the sessions with open calls whose writer is gone — the lease of
// the session or of its partition expired (a recovery storm when a tool
// worker dies: its partitions' sessions are fenced in parallel); after a
// restart it reconciles — sessions with open calls and nobody who may
// still write them are fenced — before trusting the lease watchers. It checks reviews (jw.reviews.>) against the trusted reviewer
// keys, answers prepare requests, and issues each retry plan exactly once:
// a KV create on the plan id in jw_plans, then a publish on
// jw.plans.<session> with Nats-Msg-Id set to the plan id. Plans are issued
// only on an explicit prepare, or for retry_allowed assessments when the
// operator turned AutoPlan on.
//
// # Classification without loading histories
//
// The event consumer classifies incrementally. It keeps, per session, only
// the calls that are open (a tool.call without its tool.result yet): tool,
// task, key, contract, epoch, start marker and whether tool.started was seen.
// When the result arrives the call is dropped and its assessment built from
// that state with the decision table of docs/protocol.md §9 — the same result
// recovery.Inspect gives on the confirmed history for a first attempt.
// Memory is therefore proportional to open calls, not to events seen. Two
// rarer cases load the session's history and run recovery.Inspect instead:
// a result of a retry (its assessment needs the whole chain of attempts,
// which is not kept), and a result of a call the consumer never saw (it was
// opened before a restart, below the consumer's acknowledged floor). A
// session.fenced event closes every open call of an older epoch: the old
// writer can no longer append their results, so their assessment (no
// result, or not started by the start marker) is final and published then
// — the one place such an assessment is published, whoever wrote the
// fence. A fence of a session whose calls an earlier run saw opened (below
// the consumer's floor at start) is resolved from the loaded log instead.
//
// The incremental path does not re-verify the history (corrupt_history is
// reported by inspect and by a prepare that plans, which load and verify
// it).
//
// # Restarts forget nothing
//
// Everything status and the assessments depend on is rebuilt from durable
// state before the service answers: the calls awaiting review from every
// assessment on JW_ASSESSMENTS (the latest of a call decides), less those
// a trusted completed review on JW_REVIEWS settled or a plan in jw_plans
// was issued for (a settled call stays settled when it is assessed again);
// the open calls from JW_EVENTS, every session read up to the events
// consumer's ack floor (everything after it is delivered again). Events
// delivered to a process that died and not acknowledged are delivered
// again at once (the consumer is reset to its ack floor), not after
// AckWait. So a call opened before a restart and fenced after it is
// assessed at the fence, and status says after a restart what it said
// before. An assessment a session.fenced closed is published with its
// assessment id as Nats-Msg-Id (as a takeover and its repair publish it),
// so a takeover that died before its assessment and the restarted
// classifier store it once.
//
// # Complete histories only
//
// A history the classifier loads for an event (a retry's result, a call
// it never saw opened) must reach that event's sequence: a read that comes
// back short — a replica or a deposed leader behind the consumer — would
// make a finished call look open. It is read again with backoff for up to
// 15 s, and then the event is left unacknowledged (delivered again after
// the consumer restarts); it is never classified from a short history. A
// takeover's history reaches its own fence (stream.Leases.TakeOver).
//
// # Confirmed histories, prepare and takeover
//
// A takeover checks that nobody may still write the session
// (stream.Logs.Writer), appends session.fenced at the epoch just above
// the log's (below any later owner of the partition) and loads the log. It
// publishes nothing: the classifier publishes the assessments of the calls
// the fence closed when it reads the fence, so a recoverer that dies right
// after the fence loses nothing (the fence is in the log). Only a log too
// full for a fence is assessed by the takeover itself.
//
// Prepare plans only from a confirmed history. A call with a result, or one
// left open before a session.fenced event of a newer epoch, is confirmed.
// A call still open while a writer may still write the session belongs to
// a running writer: prepare refuses it with not_confirmed rather than
// fencing a live writer. A call still open with nobody to write it is
// taken over first (fence) and then planned.
//
// # Exactly-once plans
//
// The plan id is derived from session and prior call, so every recoverer
// computes the same id. A prepare first looks the id up in jw_plans: a plan
// issued before and still unused is returned as stored, without loading
// the history (unless a trusted review with verdict completed came since:
// that still refuses). Otherwise it plans from the loaded history; the
// first KV create wins and every other prepare finds the stored plan and
// returns it. The prepare whose create stored the plan publishes it at
// once; any other checks JW_PLANS first (a message with that Nats-Msg-Id
// on jw.plans.<session>) and publishes only if it is missing, always with
// the plan id as Nats-Msg-Id, so racing recoverers and a recoverer that
// crashed between the KV create and the publish (repaired on its next
// start, which publishes every issued plan missing from JW_PLANS, or by
// the next prepare of that call) leave exactly one message per plan.
//
// # Several recoverers
//
// Every recoverer needs its own Config.Name: the name is part of its durable
// consumers, and two processes sharing one durable would split the events of
// a session between them. Several recoverers with distinct names each see
// every event and each publish its assessments: a consumer of
// jw.assessments that wants each once drops repeats by the
// Jw-Assessment-Id header's values, one per assessment of the message (the
// same for the same assessment from any recoverer, and after a
// redelivery). Plans are issued once whatever the
// number of recoverers. The micro service endpoints are load balanced over
// all of them (one queue group).
//
// # Errors
//
// Refusals are *schema.Error values with the codes of schema/errors.go:
// the history's (unknown_call, needs_review, …) and the service's
// (not_confirmed, bad_request). Match them with the schema sentinels.
package recoverer
