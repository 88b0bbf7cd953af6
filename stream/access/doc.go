// Package access is the server's permission model: the roles a client
// connects as, their keys and credentials, the accounts and permissions
// the server enforces, and the check that proves them against a running
// server. It needs no topology: jingwei auth, serve and the tests use it
// on its own.
//
// Every client connects as one [Role] (agent, reviewer, host, worker,
// recoverer, prober, admin; docs/protocol.md §4), and the server keeps it to its subjects
// on two levels.
//
// Accounts: the trusted roles (worker, recoverer, prober, admin) share one NATS
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
// users; [Users] runs the embedded server with that very text), as server.Permissions, and for operator mode as JWTs
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
package access
