package stream

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// publishAs stores an event on the session log the way a Log would, with
// the given Msg-Id, epoch and owner, after expected seq last: it plays a
// publish whose acknowledgement never reached the writer, or another writer.
func publishAs(t *testing.T, topo *Topology, session, id, owner string, epoch, last uint64, ev schema.Event) uint64 {
	t.Helper()
	ev.V, ev.Session, ev.Epoch = schema.Version, session, epoch
	if ev.At.IsZero() {
		ev.At = time.Now().UTC() // a set time is kept: a re-send carries the bytes first sent
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(topo.Names().EventsSubject(session))
	msg.Data = b
	msg.Header.Set(HeaderEpoch, strconv.FormatUint(epoch, 10))
	msg.Header.Set(HeaderOwner, owner)
	ack, err := topo.JS.PublishMsg(context.Background(), msg, jetstream.WithMsgID(id), jetstream.WithExpectLastSequencePerSubject(last))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func started(call string) schema.Event {
	return schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: call}}
}

// TestAckLostResolvedByTailReRead: an append whose ack was lost is
// re-sent; the re-send is refused (expected sequence stale) and the writer
// finds its own event on the log instead of failing or writing twice.
func TestAckLostResolvedByTailReRead(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// interloper publishes something after the writer's last seq, before
		// the writer's (re-)send; nil: the writer's own event got stored.
		interloper func(t *testing.T, topo *Topology, l *Log) uint64
		wantErr    error
		wantOwn    bool
	}{
		{name: "own event stored, ack lost", wantOwn: true},
		{name: "own earlier cancelled append, then this one", wantOwn: true, interloper: func(t *testing.T, topo *Topology, l *Log) uint64 {
			// An earlier append of this Log whose caller gave up.
			return publishAs(t, topo, l.session, l.idPre+"earlier", l.owner, l.epoch, l.last, started("c-0"))
		}},
		{name: "newer epoch got in", wantErr: ErrFenced, interloper: func(t *testing.T, topo *Topology, l *Log) uint64 {
			return publishAs(t, topo, l.session, "other-1", "w2", l.epoch+1, l.last, schema.Event{Type: schema.TypeFenced, Fence: &schema.Fence{Epoch: l.epoch + 1, Owner: "w2"}})
		}},
		{name: "same epoch, other owner", wantErr: ErrFenced, interloper: func(t *testing.T, topo *Topology, l *Log) uint64 {
			return publishAs(t, topo, l.session, "other-2", "w2", l.epoch, l.last, started("c-9"))
		}},
		{name: "older epoch got in", wantErr: ErrConflict, interloper: func(t *testing.T, topo *Topology, l *Log) uint64 {
			return publishAs(t, topo, l.session, "other-3", "w0", l.epoch-1, l.last, started("c-9"))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topo := setup(t, TopologyConfig{})
			l, err := topo.Logs().Fence(ctx, "s-1", "w1", 5)
			if err != nil {
				t.Fatal(err)
			}
			before := l.LastSeq()
			ev := started("c-1")
			ev.Session, ev.Epoch, ev.V, ev.At = "s-1", 5, 1, time.Now().UTC()
			payload, _ := json.Marshal(ev)
			id := l.idPre + "lost"
			var ownSeq uint64
			if tc.interloper != nil {
				ownSeq = tc.interloper(t, topo, l)
			}
			if tc.wantOwn {
				// The first attempt reached the stream; its ack did not.
				ownSeq = publishAs(t, topo, "s-1", id, "w1", 5, max(before, ownSeq), ev)
			}
			l.mu.Lock()
			seq, err := l.send(ctx, payload, id, time.Time{}) // the re-send
			l.mu.Unlock()
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if _, err := l.Append(ctx, started("c-2")); !errors.Is(err, tc.wantErr) {
					t.Fatalf("next append err = %v, want %v again", err, tc.wantErr)
				}
			} else {
				if err != nil || seq != ownSeq {
					t.Fatalf("send = %d, %v; want own seq %d", seq, err, ownSeq)
				}
				if _, err := l.Append(ctx, started("c-2")); err != nil {
					t.Fatalf("append after resolution: %v", err)
				}
			}
			evs, err := topo.Logs().Load(ctx, "s-1")
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range evs {
				if e.CallID() == "c-1" {
					n++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.wantOwn]; n != want {
				t.Fatalf("c-1 stored %d times, want %d: %+v", n, want, evs)
			}
		})
	}
}

func TestSupersedes(t *testing.T) {
	cases := []struct {
		epoch uint64
		owner string
		want  bool
	}{
		{4, "w1", false}, {4, "w2", false}, {5, "w1", false}, {5, "", false}, {5, "w2", true}, {6, "w1", true},
	}
	for _, c := range cases {
		if got := supersedes(c.epoch, c.owner, 5, "w1"); got != c.want {
			t.Errorf("supersedes(%d,%q; 5,w1) = %v", c.epoch, c.owner, got)
		}
	}
}
