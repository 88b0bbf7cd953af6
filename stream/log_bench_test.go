package stream_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// BenchmarkAppendParts attributes what a fenced append costs beyond the
// raw publish `jingwei bench` compares it with (pre-encoded bytes, the
// expected-sequence header only), one session each, sync=interval, the
// variants interleaved in blocks of 50 in a rotating order so load hits
// all alike. Metrics are throughput relative to raw (1 = as fast):
//
//   - rawid: raw + Nats-Msg-Id (the server's dedup table);
//   - rawhdr: rawid + Jw-Epoch and Jw-Owner;
//   - rawenc: rawhdr + schema.EncodeEvent per publish;
//   - fenced: stream.Log.Append.
func BenchmarkAppendParts(b *testing.B) {
	_, _, topo := streamtest.StartWith(b, streamtest.Config{Sync: natsnode.SyncInterval})
	ctx := context.Background()
	ev := benchEvent()
	type variant struct {
		name string
		f    func(i int)
	}
	mk := func(name string, id, hdr, enc bool) *variant {
		session := name + "-" + nuid.Next()
		subj := topo.Names().EventsSubject(session)
		e := ev
		e.V, e.Session, e.Epoch, e.At = schema.Version, session, 1, time.Now().UTC()
		pre, err := schema.EncodeEvent(e)
		if err != nil {
			b.Fatal(err)
		}
		var last uint64
		return &variant{name: name, f: func(i int) {
			msg := nats.NewMsg(subj)
			msg.Data = pre
			if enc {
				e.At = time.Now().UTC()
				if msg.Data, err = schema.EncodeEvent(e); err != nil {
					b.Fatal(err)
				}
			}
			if hdr {
				msg.Header.Set(stream.HeaderEpoch, "1")
				msg.Header.Set(stream.HeaderOwner, "bench")
			}
			opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(last)}
			if id {
				opts = append(opts, jetstream.WithMsgID(session+"-"+strconv.Itoa(i)))
			}
			ack, err := topo.JS.PublishMsg(ctx, msg, opts...)
			if err != nil {
				b.Fatal(err)
			}
			last = ack.Sequence
		}}
	}
	l, err := topo.Logs().Fence(ctx, "fenced-"+nuid.Next(), "bench", 1)
	if err != nil {
		b.Fatal(err)
	}
	vs := []*variant{mk("raw", false, false, false), mk("rawid", true, false, false), mk("rawhdr", true, true, false), mk("rawenc", true, true, true),
		{name: "fenced", f: func(int) {
			if _, err := l.Append(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}}}
	fs := make([]func(int), len(vs))
	for k, v := range vs {
		fs[k] = v.f
	}
	d := interleaved(b, fs...)
	for k, v := range vs {
		if k == 0 {
			continue
		}
		b.ReportMetric(float64(d[0])/float64(d[k]), v.name)
	}
}
