package schema_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/jingwei/jingwei/internal/testhistory"
	"github.com/jingwei/jingwei/schema"
)

// BenchmarkDecodeHistory decodes a generated 100,000-event history with
// DecodeHistory (duplicate-name, UTF-8 and field checks included). As the
// baseline, every iteration also decodes the same bytes with plain
// json.Unmarshal of each line into a schema.Event; the benchmark reports
// both times and their ratio (decode/unmarshal).
func BenchmarkDecodeHistory(b *testing.B) {
	h := testhistory.Generate(testhistory.Config{})
	b.SetBytes(int64(len(h.JSONL)))
	var base, full time.Duration
	for b.Loop() {
		t0 := time.Now()
		data := h.JSONL
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			var ev schema.Event
			if err := json.Unmarshal(data[:i], &ev); err != nil {
				b.Fatal(err)
			}
			data = data[i+1:]
		}
		t1 := time.Now()
		evs, err := schema.DecodeHistory(bytes.NewReader(h.JSONL), schema.Limits{})
		if err != nil || len(evs) != len(h.Events) {
			b.Fatal(err, len(evs))
		}
		full += time.Since(t1)
		base += t1.Sub(t0)
	}
	b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "unmarshal-ns/op")
	b.ReportMetric(float64(full.Nanoseconds())/float64(b.N), "decode-ns/op")
	b.ReportMetric(float64(full)/float64(base), "decode/unmarshal")
}
