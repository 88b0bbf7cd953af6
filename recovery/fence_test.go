package recovery_test

import (
	"strconv"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// epoch returns e stamped with epoch n.
func epoch(e schema.Event, n uint64) schema.Event { e.Epoch = n; return e }

// fence returns a session.fenced event with envelope and fence epoch n.
func fence(n uint64) schema.Event {
	e := fencedEv()
	e.Epoch = n
	e.Fence = &schema.Fence{Epoch: n, Owner: "recovery-" + strconv.FormatUint(n, 10)}
	return e
}

// TestFenceEpochs: the log proves its fences (docs/protocol.md §9). An event below
// the epoch of an earlier session.fenced was written by a fenced writer, a
// fence below an earlier fence takes ownership back, and an epoch above
// 2^53-1 is not exact in every reader: all corrupt_history, for every call
// of the history, whatever its type. The messages name the seq and both
// epochs.
func TestFenceEpochs(t *testing.T) {
	const max = schema.MaxEpoch
	unknown := schema.Event{V: 1, Session: testSession, Epoch: 1, At: testAt, Type: "x.note"}
	tests := []struct {
		name   string
		events []schema.Event
		call   string
		// msg lists parts of the message; none for a history that is fine
		msg []string
	}{
		// fine: the new owner writes at its epoch or above, re-fences at the same epoch
		{"new owner finishes the call", []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), fence(2), epoch(resultEv("c-1", schema.StatusFailed, ""), 2)}, "c-1", nil},
		{"fenced twice at one epoch", []schema.Event{callEv("c-1", effect.Idempotent, true), fence(2), fence(2), epoch(startedEv("c-1"), 2)}, "c-1", nil},
		{"fence epochs go up", []schema.Event{callEv("c-1", effect.Idempotent, true), fence(2), fence(5), epoch(startedEv("c-1"), 7)}, "c-1", nil},
		{"events above the fence", []schema.Event{fence(2), epoch(callEv("c-1", effect.Idempotent, true), 3)}, "c-1", nil},
		{"fence below an earlier event", []schema.Event{epoch(callEv("c-1", effect.Idempotent, true), 4), fence(2), epoch(startedEv("c-1"), 2)}, "c-1", nil},
		{"epoch 2^53-1", []schema.Event{epoch(callEv("c-1", effect.Idempotent, true), max), fence(max), epoch(startedEv("c-1"), max)}, "c-1", nil},
		{"epoch 0 before any fence", []schema.Event{epoch(callEv("c-1", effect.Idempotent, true), 0)}, "c-1", nil},

		// a fenced writer's events after the fence
		{"stale result after fence", []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), fence(2), resultEv("c-1", schema.StatusOK, "")}, "c-1",
			[]string{"seq 4", "epoch 1", "epoch 2", "seq 3", "fenced writer"}},
		{"stale started after fence", []schema.Event{callEv("c-1", effect.Idempotent, true), fence(2), startedEv("c-1")}, "c-1",
			[]string{"seq 3", "epoch 1", "epoch 2"}},
		{"stale call after fence", []schema.Event{fence(2), callEv("c-1", effect.Idempotent, true)}, "c-1",
			[]string{"seq 2", "epoch 1", "epoch 2"}},
		{"stale unknown event after fence", []schema.Event{callEv("c-1", effect.Idempotent, true), fence(2), unknown}, "c-1",
			[]string{"seq 3", "epoch 1", "epoch 2"}},
		{"stale event after the later of two fences", []schema.Event{callEv("c-1", effect.Idempotent, true), fence(2), fence(3), epoch(startedEv("c-1"), 2)}, "c-1",
			[]string{"seq 4", "epoch 2", "epoch 3", "seq 3"}},
		{"stale event names the first fence of the epoch", []schema.Event{callEv("c-1", effect.Idempotent, true), fence(2), fence(2), startedEv("c-1")}, "c-1",
			[]string{"seq 4", "epoch 1", "epoch 2", "at seq 2"}},
		{"fence envelope below the earlier fence", []schema.Event{callEv("c-1", effect.Idempotent, true), fence(3), epoch(fence(4), 2)}, "c-1",
			[]string{"seq 3", "epoch 2", "epoch 3"}},
		// a stale event corrupts the whole history, also for another call
		{"stale event, other call", []schema.Event{callEv("c-1", effect.Idempotent, true), fence(2), with(epoch(callEv("c-2", effect.Idempotent, true), 2), func(c *schema.Call) { c.Operation.Key = "op-2" }), resultEv("c-1", schema.StatusFailed, "")}, "c-2",
			[]string{"seq 4", "epoch 1", "epoch 2"}},

		// fences that go down
		{"fence below an earlier fence", []schema.Event{callEv("c-1", effect.Idempotent, true), fence(3), func() schema.Event { f := fence(3); f.Fence.Epoch = 2; return f }()}, "c-1",
			[]string{"seq 3", "fence epoch 2", "epoch 3", "seq 2"}},
		{"fence below, envelope too", []schema.Event{fence(5), fence(4)}, "c-1", []string{"seq 2", "epoch 4", "epoch 5"}},

		// epochs beyond 2^53-1
		{"call epoch above max", []schema.Event{epoch(callEv("c-1", effect.Idempotent, true), max+1)}, "c-1", []string{"seq 1", "9007199254740992", "9007199254740991"}},
		{"result epoch above max", []schema.Event{callEv("c-1", effect.Idempotent, true), epoch(resultEv("c-1", schema.StatusOK, ""), 1<<64-1)}, "c-1", []string{"seq 2", "18446744073709551615"}},
		{"fence epoch above max", []schema.Event{callEv("c-1", effect.Idempotent, true), func() schema.Event { f := fence(2); f.Fence.Epoch = max + 1; return f }()}, "c-1",
			[]string{"seq 2", "9007199254740992", "9007199254740991"}},
		{"fence envelope above max", []schema.Event{callEv("c-1", effect.Idempotent, true), epoch(fence(2), max+1)}, "c-1", []string{"seq 2", "9007199254740992"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			aboveMax := false
			for _, e := range tc.events {
				aboveMax = aboveMax || e.Epoch > max || e.Fence != nil && e.Fence.Epoch > max
			}
			for _, src := range []struct {
				name string
				h    func() schema.History
			}{
				{"in memory", func() schema.History { return hist(tc.events...) }},
				{"read", func() schema.History { return reader(jsonl(t, tc.events...)) }},
			} {
				a, err := recovery.Inspect(src.h(), tc.call)
				if tc.msg == nil {
					if err != nil || a.CallID != tc.call {
						t.Fatalf("%s: Inspect: %+v %v", src.name, a, err)
					}
					continue
				}
				msgs := tc.msg
				if src.name == "read" && aboveMax {
					msgs = []string{""} // the reader may refuse the epoch first, in its own words
				}
				for _, msg := range msgs {
					checkErr(t, src.name+": Inspect", err, schema.CodeCorruptHistory, msg)
				}
				_, err = recovery.PrepareRetry(src.h(), tc.call, review(schema.VerdictNotExecuted))
				checkErr(t, src.name+": PrepareRetry", err, schema.CodeCorruptHistory, msgs[0])
			}
		})
	}
}
