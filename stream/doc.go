// Package stream is everything jingwei keeps in NATS JetStream: the
// topology of docs/protocol.md §3 (streams and KV buckets, created
// idempotently), fenced session logs, and session leases with server-side
// expiry. The embedded server and the connection to an external one are
// package natsnode's; the roles, keys and accounts package access's.
//
// # Handles
//
// A [Topology] is its configuration, its streams and buckets, and one small
// handle per resource, the way jetstream hands out a Stream or a KeyValue:
// [Topology.Names] (stream, consumer and subject names, a session's
// partition), [Topology.Logs] (open, fence and load a session log),
// [Topology.Reader] (leader and direct reads of any stream),
// [Topology.Leases] (session and partition leases, worker registrations,
// takeovers), [Topology.Plans], [Topology.Approvals] and [Topology.Answers].
// A handle holds nothing but the topology and costs nothing to get.
//
// # Session logs and fencing
//
// Every session has one ordered log on jw.events.<session>. A writer holds a
// [Log] at an epoch; every [Log.Append] carries
// Nats-Expected-Last-Subject-Sequence, so two writers never interleave. A
// refused append re-reads the subject's last message: its own event (an
// append whose acknowledgement was lost) counts as done, an event of a higher
// epoch or another owner means the writer has been fenced ([ErrFenced], for
// good), anything else is [ErrConflict].
//
// # Taking a session over
//
// There is one takeover, [Leases.TakeOver]: acquire a [Hold] on the
// session from an [Acquirer] (a new, higher epoch), fence the log at that
// epoch and load the confirmed history ([Leases.Confirm]), releasing the
// hold if anything fails; it returns a [Takeover] with the hold, the
// history and a [GuardedLog]. The guarded log is the appender a runtime
// writes with: it refuses every append once the hold can no longer be
// trusted ([ErrHoldLost], which also matches [ErrFenced]) — for the
// per-session lease ([LeaseHold], [Leases.SessionLeases]) that is when
// the lease was lost or was not renewed within its TTL by the local clock.
// A writer that takes a session lazily holds the lease first
// ([Leases.HoldLease]) and confirms when it has something to record. The
// hold is an interface so that a lease on a partition of sessions can
// replace the per-session lease without changing the takeover. A full log
// ([ErrLogClosed]) has no room for a fence: [Logs.Load] gives its
// confirmed history as it stands.
//
// # Leases and epochs
//
// A lease is the key <session> in the jw_leases bucket, created with a
// per-key TTL and renewed by a compare-and-set publish that sets the TTL
// again; the server removes an expired lease and WatchLeaseExpiry reports
// it. An expired lease forgets its value, so the epochs come from a counter
// key epoch.<session> in the same bucket (no TTL) and from the log: a new
// lease's epoch is above both, and it only ever grows. Session ids cannot
// contain a dot, so the counters never collide with leases.
//
// # Durability
//
// The embedded server defaults to [SyncAlways]: the file store fsyncs every
// write before it acknowledges it, so an acknowledged event survives a crash
// of the process or the machine. docs/protocol.md §9's start-marker rule depends on
// that: a body runs only after its tool.started event is acknowledged, and
// recovery trusts that an absent tool.started means the body never ran.
// [SyncInterval] flushes on the server's interval instead (2 minutes by
// default): appends are about six times faster on a 2-core machine, but a
// power loss or kernel crash can lose events that were acknowledged (a crash
// of the process alone does not, the page cache survives it), and recovery
// may then call a started body "not started". Use it for tests and
// throw-away data. A 3-node cluster (replicas 3) relies on a quorum of
// replicas instead of fsync.
//
// # Limits
//
// A session history holds at most 100,000 events and 16 MiB serialized as
// JSON Lines (docs/protocol.md §14). Load refuses a log that is over. Append stops
// earlier: the last thousandth of the events (100) and 256th of the bytes
// (64 KiB) are a reserve that only session.fenced events may use, so a
// session whose writers filled it can still be taken over, loaded,
// inspected and refused cleanly (the refused event is history_too_large,
// nothing written). A log with no room even for a fence is closed: Fence
// returns ErrLogClosed without writing, and since no writer can append
// to it any more, its Load is confirmed as it stands. Append also refuses
// an event that does not validate (schema.EncodeEvent: field_too_long,
// corrupt_history). Append counts the serialized size with the largest
// possible seq, so whatever it accepts, Load accepts.
//
// # Failures
//
// Each request Append makes is bounded by TopologyConfig.RequestTimeout and
// retried with backoff (same Nats-Msg-Id, same expected sequence) for up to
// 15 s, so a reconnect or a stream leader election in a cluster is ridden
// out; the expected-sequence check and the re-read of the log make the
// retries safe.
package stream
