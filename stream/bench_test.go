package stream_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// benchEvent is the benchmarks' ~300-byte event: a tool.result with a
// 150-character output.
func benchEvent() schema.Event {
	return schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-00000001", Status: schema.StatusOK,
		Output: json.RawMessage(`"` + strings.Repeat("x", 150) + `"`)}}
}

// interleaved runs each of fs b.N times, f(i) for i from 0 to b.N-1, in
// blocks of 50 whose order rotates from block to block (block k starts
// with fs[k%len(fs)]), so load from other processes hits all alike, and
// returns the time each spent. It resets the benchmark timer first and
// stops it after.
func interleaved(b *testing.B, fs ...func(i int)) []time.Duration {
	d := make([]time.Duration, len(fs))
	b.ResetTimer()
	for i, block := 0, 0; i < b.N; block++ {
		n := min(50, b.N-i)
		for k := range fs {
			f := (k + block) % len(fs)
			t0 := time.Now()
			for j := range n {
				fs[f](i + j)
			}
			d[f] += time.Since(t0)
		}
		i += n
	}
	b.StopTimer()
	return d
}

// BenchmarkAppend compares fenced Log.Append with a raw js.Publish of the
// same event (json.Marshal'd per publish) carrying the same Nats-Msg-Id and
// expected-last-subject-sequence headers, one session each, ~300-byte
// events, in both durability modes. The two run interleaved in blocks of 50
// in the same loop, so load from other processes hits both alike. Metrics:
// raw-ns/op, fenced-ns/op and ratio = fenced throughput / raw throughput
// (target ≥ 0.9). ns/op counts one raw plus one fenced append.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []natsnode.SyncMode{natsnode.SyncInterval, natsnode.SyncAlways} {
		b.Run(string(mode), func(b *testing.B) {
			_, _, topo := streamtest.StartWith(b, streamtest.Config{Sync: mode})
			ctx := context.Background()
			ev := benchEvent()

			rawSession := "raw-" + nuid.Next()
			e := ev
			e.V, e.Session, e.Epoch, e.At = 1, rawSession, 1, time.Now().UTC()
			payload, _ := json.Marshal(e)
			subj := topo.Names().EventsSubject(rawSession)
			var last uint64
			raw := func(i int) {
				// A raw publisher encodes its event too (plain json.Marshal,
				// no validation).
				e.At = time.Now().UTC()
				data, err := json.Marshal(e)
				if err != nil {
					b.Fatal(err)
				}
				msg := nats.NewMsg(subj)
				msg.Data = data
				ack, err := topo.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(rawSession+"-"+strconv.Itoa(i)), jetstream.WithExpectLastSequencePerSubject(last))
				if err != nil {
					b.Fatal(err)
				}
				last = ack.Sequence
			}
			l, err := topo.Logs().Fence(ctx, "fenced-"+nuid.Next(), "bench", 1)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(payload)))
			d := interleaved(b, raw, func(int) {
				if _, err := l.Append(ctx, ev); err != nil {
					b.Fatal(err)
				}
			})
			rawT, fencedT := d[0], d[1]
			b.ReportMetric(float64(rawT.Nanoseconds())/float64(b.N), "raw-ns/op")
			b.ReportMetric(float64(fencedT.Nanoseconds())/float64(b.N), "fenced-ns/op")
			b.ReportMetric(float64(rawT)/float64(fencedT), "ratio")
		})
	}
}
