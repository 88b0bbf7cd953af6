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
// generated 100,000-event history (genHistory: 16.4 MB; schema.HistoryReader
// drained) and Inspect fed by the same reader, and reports
//
//   - inspect/decode: the median over iterations of inspect's wall time
//     divided by decode's, both timed back to back in the same iteration
//     (order alternating) so that machine load hits both alike; the target
//     is at most 1.2 (planning adds at most 20% to decoding);
//   - inspect/decode-cpu: the same for the process's CPU time (unix only,
//     every goroutine included); steadier than wall time on a shared
//     machine;
//   - decode-ns/op and inspect-ns/op: the median wall times.
//
// Run it with -benchtime 20x or so.
//
// Measured on the project's shared 2-core machine (AMD EPYC, Go 1.26),
// before and after in alternation, -benchtime 6x: when every open or failed
// call's arguments were digested (on a helper goroutine) inspect/decode-cpu
// was 1.20–1.34 and inspect/decode 1.13–1.25; canonicalizing only what a
// check needs (the inspected call's arguments, and a retry's and its
// prior's when their bytes differ) gives 1.12–1.17 and 1.10–1.16. What is
// left is mostly the per-call bookkeeping (the id and key maps,
// schema.Event.Validate), garbage collection of the per-call state and the
// iterator.
//
// The fence and epoch checks (two integer compares per event, one more
// branch per retry for RequireSignedPlans' links) changed nothing
// measurable: test binaries before and after in alternation, -benchtime
// 12x, three pairs under load from other jobs: inspect/decode-cpu
// 1.139–1.153 before, 1.130–1.152 after; inspect/decode 1.12–1.19 before,
// 1.12–1.16 after; allocations the same (2,262,890 per op).
func BenchmarkInspect(b *testing.B) {
	data, last := genHistory(make([]byte, 0, 17<<20), schema.MaxHistoryEvents)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	decode := func() {
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
		if n != schema.MaxHistoryEvents {
			b.Fatalf("decoded %d events", n)
		}
	}
	inspect := func() {
		a, err := recovery.Inspect(reader(data), last)
		if err != nil || a.CallID != last {
			b.Fatalf("Inspect: %+v %v", a, err)
		}
	}
	alternateInspectDecode(b, decode, inspect)
}

// alternateInspectDecode times decode and inspect alternately (each first
// in every other iteration) and reports the medians of their wall times
// and of the per-iteration ratios, wall and CPU.
func alternateInspectDecode(b *testing.B, decode, inspect func()) {
	type sample struct{ wall, cpu time.Duration }
	timed := func(f func()) sample {
		runtime.GC() // neither run pays for the other's garbage
		c, w := cpuTime(), time.Now()
		f()
		return sample{time.Since(w), cpuTime() - c}
	}
	var decWall, insWall, wallRatio, cpuRatio []float64
	n := 0
	for b.Loop() {
		var d, i sample
		if n%2 == 0 {
			d, i = timed(decode), timed(inspect)
		} else {
			i, d = timed(inspect), timed(decode)
		}
		n++
		decWall = append(decWall, float64(d.wall))
		insWall = append(insWall, float64(i.wall))
		wallRatio = append(wallRatio, float64(i.wall)/float64(d.wall))
		if d.cpu > 0 {
			cpuRatio = append(cpuRatio, float64(i.cpu)/float64(d.cpu))
		}
	}
	b.ReportMetric(median(decWall), "decode-ns/op")
	b.ReportMetric(median(insWall), "inspect-ns/op")
	b.ReportMetric(median(wallRatio), "inspect/decode")
	if len(cpuRatio) > 0 {
		b.ReportMetric(median(cpuRatio), "inspect/decode-cpu")
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
