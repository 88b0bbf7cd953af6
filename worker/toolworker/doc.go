// Package toolworker is jingwei's tool worker (docs/protocol.md §13): it takes tool
// requests that agents publish on jw.requests.<session>, owns partitions
// of sessions through partition leases, and runs every request through the canonical
// runtime of package worker. It also executes the retry plans published on
// jw.plans.<session>, and serves jw.api.call (its [Gateway]).
//
// # Ownership and order
//
// Sessions are divided into the topology's partitions (docs/protocol.md
// §3, §7): the server files jw.requests.<session> under
// jw.requests.<partition>.<session>. A worker owns partitions, not
// sessions: it holds a partition's lease (stream.Leases.AcquirePartition,
// with the lease-clock guard), renews it every RenewInterval — one write
// per partition, whatever its number of sessions — and reads the
// partition's requests and plans through one durable consumer each
// (stream.Names.RequestConsumerName, PlanConsumerName). A new owner
// deletes whatever consumers the previous owner left and creates its own,
// so every unacknowledged request is delivered again at once, in order;
// the consumers' InactiveThreshold (3 × lease TTL + 5 s) removes what a
// SIGKILLed worker left even when nobody takes its partitions.
//
// Inside a partition, sessions run in parallel and each session one item
// at a time, in stream order: a message of a busy session is held, kept in
// progress (never negatively acknowledged), so a redelivery can never
// overtake. At most MaxSessions sessions run at once over all partitions;
// a session with work beyond that waits for a slot, counted in Stats and
// logged, never silently; the server delivers at most MaxHeld unacknowledged
// messages per partition consumer. A session's log is fenced at the
// partition's epoch (stream.Leases.ConfirmIn) lazily, only when a first
// call must be recorded; a session whose log already ends with this
// owner's event at that epoch is confirmed with reads only. Sessions idle
// for IdleTimeout leave memory (their deferred budget counts written).
//
// # Rebalancing
//
// Every worker registers itself (stream.Leases.RegisterWorker, renewed
// with the leases) and, every PollInterval, reads the registry and the
// partition leases: it takes free partitions up to its share (partitions /
// live workers, rounded up) and drains one beyond it per round — stops
// fetching, lets its running calls finish, deletes the request consumer,
// writes deferred budget counts and releases the lease; the partition's
// queued requests go to the next owner, in order.
//
// The free partitions of a round are taken together, and the round does
// not wait for them (a take in flight counts toward the share). A take
// renews its lease from the acquisition on and may run 12 s: after a NATS
// node loss whose election outlasted the lease TTL every lease lapses at
// once, and each take then creates R3 consumers whose raft groups may
// first have to elect a leader.
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
// # Losing a partition
//
// If a renewal fails with stream.ErrLeaseLost, or renewals keep failing
// until the lease's TTL has passed by the worker's own clock, the worker
// stops touching the partition at once: appends of its sessions are
// refused locally, running bodies' contexts are cancelled, and the
// consumers are left to the next owner. A session fenced by another
// writer (an append refused with stream.ErrFenced) is confirmed again,
// above that writer's epoch, before its next call. Open calls stay open
// in the log; recovery classifies them.
//
// # Draining
//
// When Run's context is cancelled the worker stops taking requests and
// plans, lets running bodies finish (for at most DrainTimeout, after which
// they are cancelled and recorded as cancelled), then deletes its request
// consumers, releases its partition leases and its registration, and Run
// returns.
//
// # Retry plans
//
// Plans are read through the partition's plan consumer and queued behind
// the session's current work. A plan that jw_plans already holds as
// consumed is acknowledged at once; any other runs with
// worker.Runtime.CallWithOptions (CallOptions{Retry: plan}); the runtime
// verifies it and consumes it in jw_plans with a compare-and-set, so a
// plan delivered twice is attempted at most once.
//
// # Approvals
//
// A call whose tool asks for approval waits without a goroutine: one timer
// per session (its earliest deadline), answers through one consumer shared
// by the tool workers (docs/protocol.md §17, approval.go). A worker that
// takes a partition finds, through the approval request subjects of
// JW_APPROVALS, the sessions of it whose log still leaves a call waiting
// (read only: a session with nothing waiting is never fenced) and confirms
// each at once, so a crashed owner's waiting calls keep their deadlines
// without other work for their sessions: calls past their deadline end
// rejected at stage approval — unless JW_APPROVALS holds a trusted answer
// received in time, which is honoured — and the others are asked again and
// timed.
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
// jw.requests.<session> (Nats-Msg-Id stream.RequestMsgID) and polls the stored
// session log for the tool.call carrying its request id and that call's
// tool.result, which it answers with; never a message from the wire. A
// request id already in the log is answered from the log without running
// again; a request refused for good is answered with the code recorded on
// jw.answers.<session>; no result within CallTimeout is result_pending
// (the call may still run).
package toolworker
