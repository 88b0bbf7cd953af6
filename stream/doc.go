// Package stream is everything jingwei keeps in NATS JetStream: an embedded
// server, the connection to an external one, the topology of docs/protocol.md §3
// (streams and KV buckets, created idempotently), fenced session logs, and
// session leases with server-side expiry.
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
// There is one takeover, [Topology.TakeOver]: acquire a [Hold] on the
// session from an [Acquirer] (a new, higher epoch), fence the log at that
// epoch and load the confirmed history ([Topology.Confirm]), releasing the
// hold if anything fails; it returns a [Takeover] with the hold, the
// history and a [GuardedLog]. The guarded log is the appender a runtime
// writes with: it refuses every append once the hold can no longer be
// trusted ([ErrHoldLost], which also matches [ErrFenced]) — for the
// per-session lease ([LeaseHold], [Topology.SessionLeases]) that is when
// the lease was lost or was not renewed within its TTL by the local clock.
// A writer that takes a session lazily holds the lease first
// ([Topology.HoldLease]) and confirms when it has something to record. The
// hold is an interface so that a lease on a partition of sessions can
// replace the per-session lease without changing the takeover. A full log
// ([ErrLogClosed]) has no room for a fence: [Topology.Load] gives its
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
// # Roles
//
// Every client connects as one [Role] (agent, reviewer, host, worker,
// recoverer, admin; docs/protocol.md §4), and the server keeps it to its subjects
// on two levels.
//
// Accounts: the trusted roles (worker, recoverer, admin) share one NATS
// account ([RoleConfig.Account], "JINGWEI"), which holds JetStream and every
// stream and bucket. Each untrusted role has an account of its own
// ([RoleConfig.AccountName]: JINGWEI_AGENT, JINGWEI_REVIEWER, JINGWEI_HOST)
// without JetStream, which imports from the trusted account exactly the
// services the role uses ([RoleConfig.Imports]: JetStream publishes of its
// requests or reviews, its service endpoints, message and direct gets of
// the streams it reads, stream info of the topology, $JS.API.INFO, and for
// the host $SRV.>). A service import rewrites the reply subject (_R_.… in
// the trusted account), so an answer always comes back to the requester's
// own account: a reply subject naming a bucket or a session log stores
// nothing, and no client sees the inboxes of another account. Batched
// direct gets and $SRV.PING answer with many messages: their imports have
// response type stream ([ResponseStream]).
//
// Permissions inside each account: [RoleConfig.Grants] is each role's
// table. An untrusted role may publish exactly what its account imports and
// receive its replies on _INBOX.>. The worker's and the recoverer's tables
// name their subjects and carry denies that keep the attacks out whatever
// the allows say (only admin changes streams; only workers and the
// recoverer write session logs and buckets; only the recoverer publishes
// plans and assessments and receives service requests, which it answers
// through a response permission; nobody publishes on _INBOX or _R_;
// consumers of the work queue and plans are the workers', of the logs and
// reviews the recoverer's).
//
// The same tables come as nats-server configuration text
// ([RoleConfig.AccountsBlock]: accounts with exports, imports and nkey
// users; [EmbeddedConfig.Users] runs the embedded server with that very
// text), as server.Permissions, and for operator mode as JWTs
// ([KeyDir.IssueRoleCreds]: account JWTs signed by the operator, private
// exports with activation tokens, user creds signed by each role's
// account). [KeyDir] keeps the keys; [CheckRoles] connects as each role and
// proves the server allows what it must and refuses the rest, saying how:
// a permissions violation, not imported into the role's account, or
// account isolation.
//
// Tenants ([RoleConfig.Tenants], [Tenant]): the agent role sees every
// session. Agents that must not see each other's are given an account per
// tenant ([RoleConfig.TenantAccountName]) importing only
// jw.api.call.<tenant> and jw.api.status.<tenant> under the plain local
// subjects, so the service learns the tenant from a subject the server
// sets and answers about the tenant's sessions (<tenant>-…) only; the
// tenant reaches no stream at all. [KeyDir.AddTenantAgent] makes its
// agents' keys; AccountsBlock, IssueRoleCreds and CheckRoles cover them.
//
// What remains: roles that share an account share its inboxes. The
// trusted roles see each other's replies, and a push consumer's deliver
// subject is not checked against its creator's permissions, so a worker or
// the recoverer can have a stream delivered onto any subject of the trusted
// account; the clients of one untrusted role (all agents, say) see each
// other's replies. Readers must not trust a message for being on a jingwei
// subject alone.
//
// # Failures
//
// Each request Append makes is bounded by TopologyConfig.RequestTimeout and
// retried with backoff (same Nats-Msg-Id, same expected sequence) for up to
// 15 s, so a reconnect or a stream leader election in a cluster is ridden
// out; the expected-sequence check and the re-read of the log make the
// retries safe.
package stream
