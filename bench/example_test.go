package bench_test

import (
	"os"

	"github.com/jingwei/jingwei/bench"
)

// Rows are built from the medians of both sides; the ratio is always
// jingwei / raw and Met follows the target, whichever way it points.
func ExampleWriteTable() {
	rs := []bench.Result{
		bench.NewResult("append 1 session", 16200, 18000, "events/s", bench.Target{Check: bench.RatioAtLeast, Limit: 0.9}),
		bench.NewResult("Inspect vs decode", 130, 100, "ms", bench.Target{Check: bench.RatioAtMost, Limit: 1.2}),
		bench.NewValueResult("recovery worker VmRSS", 40, "MiB", bench.Target{Check: bench.ValueBelow, Limit: 150, Text: "< 150 MiB"}),
	}
	_ = bench.WriteTable(os.Stdout, rs)
	// Output:
	// scenario               jingwei  raw    unit      ratio  target        met
	// append 1 session       16200    18000  events/s  0.90   ratio >= 0.9  true
	// Inspect vs decode      130      100    ms        1.30   ratio <= 1.2  false
	// recovery worker VmRSS  40       -      MiB       -      < 150 MiB     true
}
