package recovery_test

import (
	"bytes"
	"io"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// BenchmarkInspect measures, in the same run, the plain decode of a
// generated 100,000-event history (schema.NewHistoryReader drained) and
// Inspect fed by the same reader, and reports the ratio of their median
// times as inspect/decode (the target is at most 1.2: planning adds at most
// 20% to decoding). The two are timed alternately in every iteration so
// that machine noise hits both alike; medians keep a burst of load on a
// shared machine from deciding the ratio. Run it with -benchtime 20x or so.
func BenchmarkInspect(b *testing.B) {
	data, last := genHistory(make([]byte, 0, 17<<20), schema.MaxHistoryEvents)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var dec, ins []time.Duration
	decode := func() {
		runtime.GC() // neither run pays for the other's garbage
		start := time.Now()
		h := schema.NewHistoryReader(bytes.NewReader(data), schema.DefaultLimits)
		n := 0
		for {
			_, err := h.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		dec = append(dec, time.Since(start))
		if n != schema.MaxHistoryEvents {
			b.Fatalf("decoded %d events", n)
		}
	}
	inspect := func() {
		runtime.GC()
		start := time.Now()
		a, err := recovery.Inspect(reader(data), last)
		ins = append(ins, time.Since(start))
		if err != nil || a.CallID != last {
			b.Fatalf("Inspect: %+v %v", a, err)
		}
	}
	n := 0
	for b.Loop() {
		if n%2 == 0 {
			decode()
			inspect()
		} else {
			inspect()
			decode()
		}
		n++
	}
	d, i := median(dec), median(ins)
	b.ReportMetric(float64(d.Nanoseconds()), "decode-ns/op")
	b.ReportMetric(float64(i.Nanoseconds()), "inspect-ns/op")
	b.ReportMetric(float64(i)/float64(d), "inspect/decode")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
