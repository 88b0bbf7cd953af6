// Package toolworker is jingwei's tool worker (docs/protocol.md §13): it takes tool
// requests that agents publish on jw.requests.<session>, owns sessions
// through their leases, and runs every request through the canonical
// runtime of package worker. It also executes the retry plans published on
// jw.plans.<session>, and serves jw.api.call (its [Gateway]).
//
// # Ownership and order
//
// A session is run by exactly one owner at a time: the worker that holds its
// lease in jw_leases. Taking a session is docs/protocol.md §7's takeover, done by
// package stream: the lease is held with stream.Topology.HoldLease (which
// guards appends by the local clock) when the session is taken, and the log
// is fenced and the confirmed history loaded (stream.Topology.Confirm) only
// when a first call must be recorded; a request that cannot become a call
// is answered without touching the log. From then on every event the worker appends carries that epoch,
// the lease is renewed every RenewInterval, and the session's requests are
// read by a consumer filtered on jw.requests.<session> alone, with
// MaxAckPending 1 and one request run at a time: requests of a session run
// in the order they were published, and a redelivery can never overtake a
// later request. JW_REQUESTS is a work-queue stream, which allows one
// consumer per subject; the consumer's name is derived from the session
// (<PREFIX>_req_<session>), so a new owner deletes whatever consumer the
// previous owner left behind (its unacknowledged request becomes deliverable
// again at once) and creates its own.
//
// Sessions are discovered without consuming anything: every worker listens
// to jw.requests.* with a plain subscription (a hint that a session has
// work) and polls the stream's per-subject counts every PollInterval (for
// requests published while no worker ran, and for sessions whose owner
// died and whose lease has since expired). A worker tries to take a session
// with work only while it owns fewer than MaxSessions, so sessions spread
// over worker processes. A session without work for IdleTimeout is given
// back (consumer deleted, lease released). A session that cannot be taken
// (its history is over the limits or corrupt) is retried with a backoff
// from 1 s to 5 minutes, since every attempt appends a session.fenced event.
//
// # Exactly what runs
//
// A request is acknowledged as soon as its tool.call event is acknowledged
// by the session log, before admission and before the body: a crash after
// that point never runs it again (recovery classifies the open call). Until
// then it is not acknowledged, and a crash leaves it for the next owner.
// When a worker takes a session it collects the request ids of every
// tool.call in the history; a request whose id is among them (a redelivery
// after a crash, or an agent publishing the same request twice) is
// acknowledged and never run again. The set is bounded by the history
// limit (100,000 events).
//
// A request that cannot become a call (not JSON, no request_id, another
// session's, an unknown tool, invalid arguments JSON) is terminated and
// logged; nothing is written to the session log.
//
// # Losing a session
//
// If a renewal fails with stream.ErrLeaseLost, or renewals keep failing
// until the lease's TTL has passed by the worker's own clock, or an append
// is refused with stream.ErrFenced, the worker stops touching the session at
// once: further appends are refused locally (the runtime reports the
// session fenced), the running body's context is cancelled, and the
// session's consumer is left to the next owner. The call stays open in the
// log; recovery classifies it.
//
// # Draining
//
// When Run's context is cancelled the worker stops taking requests and
// plans, lets running bodies finish (for at most DrainTimeout, after which
// they are cancelled and recorded as cancelled), then deletes its consumers
// and releases its leases, and Run returns.
//
// # Retry plans
//
// Plans are read from jw.plans.* through one durable consumer shared by all
// tool workers (<PREFIX>_toolworker_plans), one at a time without prefetch.
// A plan that jw_plans already holds as consumed is acknowledged at once. A
// plan for a session this worker
// owns, or can take, is queued behind that session's current request and
// run with worker.Gateway.CallWithOptions (CallOptions{Retry: plan}); the runtime verifies it and
// consumes it in jw_plans with a compare-and-set, so a plan delivered twice,
// or to two workers, is attempted at most once. A plan for a session another
// process owns is negatively acknowledged with PlanRetryDelay and comes
// back, possibly to the owner. A plan delivered to a worker that dies
// before the plan's tool.call is recorded comes back after AckWait.
//
// # Requests that never become calls
//
// A request that can never become a call (malformed, an unknown tool, too
// large to record, a full or corrupt session log) gets a durable answer on
// jw.answers.<session> with its code, and is terminated: nothing is
// written to the session log. jw.api.call answers with that code.
//
// # The gateway (jw.api.call)
//
// Every worker serves jw.api.call as the micro service "jingwei-gateway"
// (service.GatewayName) unless Config.DisableGateway is set; [Gateway] is
// usable on its own too. A call publishes the request on
// jw.requests.<session> (Nats-Msg-Id = request_id) and polls the stored
// session log for the tool.call carrying its request id and that call's
// tool.result, which it answers with; never a message from the wire. A
// request id already in the log is answered from the log without running
// again; a request refused for good is answered with the code recorded on
// jw.answers.<session>; no result within CallTimeout is result_pending
// (the call may still run).
package toolworker
