package recovery_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/jingwei/jingwei/bench/histgen"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// BenchmarkInspectGenerated is BenchmarkInspect over the history the
// `jingwei bench` row "Inspect vs decode" reads (bench/histgen's
// default 100,000 events: combined-form calls, retries with reviews,
// fences, rejections), reporting the same metrics. Run it with
// -benchtime 10x or so.
//
// Measured on the shared 2-core machine (1 Dec, load average 5-7 from
// other jobs), test binaries before and after the rework of the
// per-call index in alternation, -benchtime 8x-10x: inspect/decode-cpu
// 1.23-1.39 before, 1.05-1.23 after. Inspect's own work alone
// (BenchmarkInspectDecoded, no decode) went from 11.5-13.6 ms, 9.2 MB and
// 19,900 allocations per history to 5.3-6.2 ms CPU, 5.0 MB and 3,700: the
// two string-keyed map inserts per call were most of it (they are now one
// pass over per-call hashes after the read, see dups), then the call
// structs (184 → 144 bytes) and one allocation per call's arguments.
func BenchmarkInspectGenerated(b *testing.B) {
	h := histgen.Generate(histgen.Config{})
	data, last := h.JSONL, h.LastCall
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	decode := func() {
		r := schema.NewHistoryReader(bytes.NewReader(data), schema.DefaultLimits)
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
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

// BenchmarkInspectOnly times Inspect alone over the generated history, for
// profiles (-cpuprofile, -memprofile) of Inspect without the decode-only
// runs of BenchmarkInspectGenerated.
func BenchmarkInspectOnly(b *testing.B) {
	h := histgen.Generate(histgen.Config{})
	data, last := h.JSONL, h.LastCall
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		a, err := recovery.Inspect(reader(data), last)
		if err != nil || a.CallID != last {
			b.Fatalf("Inspect: %+v %v", a, err)
		}
	}
}

// BenchmarkDecodeOnly is the decode BenchmarkInspectOnly's Inspect starts
// from, alone, for comparing profiles.
func BenchmarkDecodeOnly(b *testing.B) {
	h := histgen.Generate(histgen.Config{})
	data := h.JSONL
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r := schema.NewHistoryReader(bytes.NewReader(data), schema.DefaultLimits)
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkInspectDecoded times Inspect over the generated history's
// events already in memory (schema.Events): Inspect's own work — the
// checks, the per-call state, Validate and the iteration — without the
// decode, which is most of BenchmarkInspectOnly and most of its noise;
// cpu-ns/op is the median process CPU time (unix only).
func BenchmarkInspectDecoded(b *testing.B) {
	h := histgen.Generate(histgen.Config{})
	b.ReportAllocs()
	var cpu []float64
	for b.Loop() {
		c := cpuTime()
		a, err := recovery.Inspect(schema.Events(h.Events), h.LastCall)
		cpu = append(cpu, float64(cpuTime()-c))
		if err != nil || a.CallID != h.LastCall {
			b.Fatalf("Inspect: %+v %v", a, err)
		}
	}
	if cpu[0] > 0 {
		b.ReportMetric(median(cpu), "cpu-ns/op") // every goroutine's, GC included
	}
}
