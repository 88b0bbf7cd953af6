// Package bench measures jingwei against the raw JetStream operations it is
// built on, in one run on one machine, and reports ratios rather than bare
// speeds: a ratio measured in the same run survives a noisy, shared machine
// far better than an absolute figure does.
//
// [Run] starts an embedded nats-server (file store in a temporary
// directory), runs every scenario next to its raw baseline and returns one
// [Result] per row. Rounds alternate the order of the jingwei and the raw
// measurement (even rounds jingwei first, odd rounds raw first), and every
// figure is the median over the rounds, so a burst of load from another
// process hits both sides alike.
//
// The scenarios (see [Scenarios]):
//
//  1. appends: fenced stream.Log.Append vs a raw publish carrying
//     Nats-Expected-Last-Subject-Sequence of an event of the same size; one
//     session, and 64 sessions written concurrently. Both durability modes
//     (a second embedded server runs with sync=always after the interval
//     server is done; --quick runs interval only).
//  2. runtime: worker.Runtime calls of a no-op tool vs the same number of raw
//     appends, three per call (tool.call, tool.started, tool.result, each a
//     raw publish with the expected-sequence header). The runtime also
//     counts the call in jw_budget: that fourth write is part of its cost.
//  3. classify: the recovery worker draining N pre-filled events of finished
//     calls (decode, classify, publish one assessment per call, ack) vs a raw
//     durable consumer with the same settings (AckAll, same batch) that only
//     acks. Both are timed from the consumer's creation to its ack floor
//     reaching the last event.
//  4. inspect: recovery.Inspect on a generated 100,000-event history vs
//     decoding it with schema.HistoryReader (ratio = inspect time / decode
//     time, lower is better).
//  5. issue: four recovery workers racing to issue the same plans through
//     Recoverer.Prepare (load, PrepareRetry, KV create on the plan id,
//     publish with the plan id as Nats-Msg-Id) vs four goroutines racing raw
//     KV creates on the same keys; plus the number of duplicate plans
//     published (must be 0).
//  6. crash: a `jingwei worker` child process with a slow tool is SIGKILLed
//     while its bodies run; the latency from the kill to each open call's
//     assessment on jw.assessments.> (recovery worker in this process),
//     p50 and p99, against the lease TTL (target p99 ≤ TTL + 1 s).
//  7. memory: a `jingwei recover` child process consumes 1,000,000 events
//     of finished calls (100,000 with Quick) with a few calls left open
//     under live leases; its VmRSS and VmHWM from /proc (Linux only).
//
// Targets are checked as measured: a missed target is a row with met=false,
// never an error. A scenario that cannot run (a child that dies, a server
// error) is an error.
package bench
