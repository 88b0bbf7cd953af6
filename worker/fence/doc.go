// Package fence makes a tool's own writes conditional on the call's fencing
// token (worker.Fence), so that a writer that was fenced while its body ran
// — a tool worker frozen with SIGSTOP past its lease, a body that ignores
// its context — cannot land its side effect after a newer writer's.
//
// Fencing the session log (docs/protocol.md §7) stops the old writer's
// events, not its side effects: its body may still be running. The
// classic answer is a fencing token checked by the store the side effect
// goes to. A [Store] does that on one JetStream stream, a KV bucket or
// any stream: every resource is one subject (a KV key is the subject
// $KV.<bucket>.<key>), and its last message carries the session and epoch
// of the writer that wrote it (headers Jw-Fence-Session, Jw-Fence-Epoch,
// Jw-Fence-Call). A write reads the subject's last message, refuses with
// [ErrStale] when it was written at a higher epoch of the same session,
// and otherwise publishes with Nats-Expected-Last-Subject-Sequence set to
// the sequence it read — the KV revision compare-and-set — so the check
// and the write are one atomic step on the stream's leader: a write that
// read a stale last message (a lagging replica, a writer frozen between
// the read and the write) is refused by the server and read again.
//
// A transient failure (a 503 while the stream elects a leader, a timeout)
// is retried; every publish of one write carries the same Nats-Msg-Id, so a
// write whose acknowledgement was lost is found on the subject and not
// made twice.
//
// A newer writer raises a resource's fence by writing it; a reviewer who
// is about to sign not_executed for a call whose writer was fenced raises
// it without a business write ([Store.Raise], at the fence's epoch) before
// checking the store: from then on the old writer's late write is refused,
// so "no record" stays true.
//
// Epochs are comparable only within one session: a resource last written
// by another session does not fence the token (put the session in the
// resource's subject when several sessions write it). A zero-epoch token
// (a runtime whose log cannot tell its epoch) is refused by any resource
// written at epoch 1 or more.
//
// What a Store cannot do: fence a system it does not write to. A tool
// whose external system takes an idempotency key passes the operation key
// (worker.Fence.Task + Key, stable across retries) so that the external
// system deduplicates the old writer's late request against the retry's.
package fence
