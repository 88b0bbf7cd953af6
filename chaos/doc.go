// Package chaos is `jingwei chaos`: it tests a jingwei deployment the way a
// user would break it — processes killed, frozen and cut off under load —
// and then checks, from the business records and the raw jingwei streams,
// that nothing ran twice, nothing acknowledged was lost and every crashed
// call was reported truthfully.
//
// The harness is built against jingwei's public behaviour only: the real
// binary as child processes (`jingwei setup`, `jingwei worker`, `jingwei
// recover`, and the hidden `jingwei chaos node`), the wire format, the
// streams and the service, each with its role's key. Nothing in it reads a
// process's memory or a package's internals, so it keeps testing the same
// thing while the code underneath changes.
//
// # Processes
//
// [ModeCluster] (the default) starts a NATS cluster of three nodes on
// loopback, each a child process running an embedded nats-server with
// JetStream, its store in the run's directory and authorization on with
// the roles' accounts ([RunNode]). Every route between two nodes goes
// through a TCP proxy the harness owns: node i dials node j's route port
// through proxy [i][j], so cutting a node's proxies both ways partitions it
// from the others, and healing them lets the routes reconnect. Each node
// advertises a black hole as its route address: a route learned by gossip
// would otherwise go straight to a node's route port around the proxies.
// [ModeSingle] starts one node, no proxies; [ModeExternal] uses an existing
// deployment (its URL and role-keys directory) and never touches its NATS
// nodes: before anything starts it checks every role's key (or, with
// Config.Operator, creds file), the planner key and the planners, and
// connects each role once, so that wrong credentials fail the run at once
// with ErrCredentials naming the role and the file.
//
// The topology is created as admin with `jingwei setup --replicas N`,
// retried until the cluster has a JetStream meta leader. Then one
// `jingwei recover` (trusting the harness's reviewer key) and Config.Workers
// `jingwei worker` processes run, each a slot whose incarnations are
// numbered: a tool worker's owner id, <run>-w<slot>-<incarnation>, is what
// its events carry in Jw-Owner, so the log says which incarnation wrote
// each call. A supervisor restarts, after a second, any process that exits
// by itself, and counts it (Report.Exercised.UnexpectedExits, with the end
// of its log in Report.Notes).
//
// # Workload
//
// Config.Actions logical actions, half orders.create, half payments.charge,
// over Config.Sessions sessions, published by the agent role as an agent
// publishes them: a JetStream publish on jw.requests.<session> with the
// request id as Nats-Msg-Id, retried until acknowledged. A fraction
// (Config.Republish) is published a second time with the same request id,
// half of those without Nats-Msg-Id so that the tool worker's own check is
// exercised and not only the server's dedup window. Each action's marker is
// in its arguments (the order's customer, the charge's account), so every
// business record names the action it belongs to.
//
// # Faults
//
// During Config.Duration, on a schedule drawn from Config.Seed: a random
// live tool worker is SIGKILLed every Config.KillEvery and restarted at
// once; the recovery worker is SIGKILLed Config.RecovererKills times and
// restarted; on a cluster, Config.NodeKills nodes are killed in turn (down
// for Config.NodeDown) and Config.Partitions times one node is cut off (for
// Config.PartitionFor), one cluster fault at a time. Part of the tool-worker
// incarnations (Config.SlowFraction) wait in their bodies (--tool-delay-after,
// or for some --tool-delay), so kills land in the middle of calls.
// Config.Pauses times a tool worker, restarted ahead of time with bodies
// that wait before their side effect, is frozen with SIGSTOP while a
// payment of its is started and not yet charged; while it is frozen the
// host and the reviewer handle the calls it left (the reviewer raises the
// ledger's fence, truthfully finds no charge, signs not_executed, the
// retry charges), then SIGCONT lets it run: the zombie writer, whose
// late charge the ledger refuses because its fencing token is older than
// the fence (package worker/fence).
//
// # Host and reviewer phase
//
// Once the faults have stopped and nothing moves (the work queue empty,
// every call assessed, or nothing changed for three lease TTLs), the
// harness reads everything back (the checkpoint: it also asks jw.api.status
// which calls await review), then in rounds prepares the latest attempt of
// every unfinished action — a third of the retry_allowed ones by three
// concurrent prepares, which must all return the same plan — reviews every
// needs_review payment from the ledger first (the ledger's fence raised to
// the session's latest epoch, then: a charge by that call id: completed;
// none: not_executed; signed with a trusted reviewer key), and
// lets the plans run, until nothing is left or Config.HostRounds rounds
// are done.
//
// # Invariants
//
// Everything is then read back as admin — JW_EVENTS with each message's
// Jw-Owner and stored time, JW_ASSESSMENTS with Jw-Assessment-Id,
// JW_REVIEWS, JW_PLANS, JW_ANSWERS, the orders bucket and TOOLS_LEDGER —
// and each [Row] of the report computed from it and the harness's own facts
// (what it published and got a PubAck for, whom it killed and when). The
// assessments are held to an oracle written here from the protocol's
// decision table, not taken from the recovery package. The rows and what
// they count are documented in the report (Row.Note) and in `jingwei help
// chaos`; the must-hold rows decide Report.Err, the others are reported.
//
// # Crash → first assessment, and nats-server's elections
//
// Every call a killed tool worker left open is a sample: from the SIGKILL
// to its first stored assessment. The bound is the lease TTL + 1 s on one
// node. On a cluster a takeover needs JetStream leaders: the lease
// bucket's (the server expires a lease there; the recovery worker's hold),
// the session logs' (the fence), the recovery worker's consumer of them
// (its classifier reads the fence), the assessments' (the publish) and
// the meta leader (a consumer recreated after a node loss). When the node
// that led one of them dies or is cut off, nothing can be written to it
// until nats-server's raft elects a new leader, and that election waits a
// random election timeout of 4–9 s (server/raft.go,
// minElectionTimeoutDefault and maxElectionTimeoutDefault; not
// configurable). No client can shorten it.
//
// So the harness measures it: on a cluster a leader monitor asks, every
// 100 ms on an admin connection to each node, who leads each of those
// five ($JS.API.INFO, answered only by the meta leader;
// $JS.API.STREAM.INFO and $JS.API.CONSUMER.INFO, answered only by the
// stream's or the consumer's leader; an answer not back within 300 ms is
// no leader). A leaderless window is a span in
// which no healthy node (neither down nor cut off) got an answer; the
// report lists them after each node kill, partition, heal and restart
// (Report.LeaderWindows), and what the faulted node itself saw
// (Report.IsolatedLeaderWindows: what a process connected to it lived
// through). Measured on loopback (1,200 actions, seed 3697852759826715):
// 4.1–4.8 s after a node kill for each group the node led, 5.4–6.0 s on
// the majority side of a 6 s partition of a leader (cut short by the
// heal), and 6.2 s more after the heal for a group the cut-off node
// came back to with a higher term; the cut-off node's own view stayed
// leaderless for 6.3–12.8 s.
//
// Each sample is then put in one group (Latency.Split), by what happened
// between its lease's expiry (the kill + the TTL) and its first
// assessment: leaderless, when that span met a leaderless window (its
// figure is printed with the window lengths, and its latency minus the
// leaderless time — what jingwei added — and the time from the leaders'
// return to the fence); node down, when a node was down or cut off during
// it but every leader was there; the recovery worker restarted; healthy.
// The cluster's bound, the lease TTL + 5 s "with a node down", is checked
// on the node-down group, and --strict gates on it (on one node, on every
// sample); every group, and all samples together, stay printed, so nothing
// is hidden. A node kill lasts 20 s by default (15 s quick), and while a
// node is out (killed or cut off) the harness, once the leader monitor sees
// every leader of the fence path back on the other nodes, kills the tool
// worker with the most open calls (not fenced) about every second, instead
// of the random kills, until a lease TTL + 1.5 s before the node returns:
// so that the node-down group is made of leases that expire with a node
// out and every leader there (9-21 samples a default run on loopback, not
// the 2-4 the random kills left; fewer when the workers have few calls
// open while a node is out).
package chaos
