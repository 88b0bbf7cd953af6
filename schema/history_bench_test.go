package schema_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/jingwei/jingwei/bench/histgen"
	"github.com/jingwei/jingwei/schema"
)

// BenchmarkDecodeHistory decodes a generated 100,000-event history with
// DecodeHistory (duplicate-name, UTF-8 and field checks included). As the
// baseline, every iteration also decodes the same bytes with plain
// json.Unmarshal of each line into a schema.Event; the benchmark reports
// both times and their ratio (decode/unmarshal).
func BenchmarkDecodeHistory(b *testing.B) {
	h := histgen.Generate(histgen.Config{})
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

// BenchmarkDecodeEvent decodes the three events of a finished call (the
// recovery worker's classifier decodes every event of the log this way).
func BenchmarkDecodeEvent(b *testing.B) {
	lines := [][]byte{
		[]byte(`{"v":1,"session":"s-12","epoch":1,"at":"2026-11-30T10:00:00.123456789Z","type":"tool.call","call":{"call_id":"c-1234","tool":"orders.create","arguments":{"sku":"A-1","qty":2,"customer":"cust-9"},"start_marker":true,"operation":{"task":"t-1","key":"op-c-1234","contract":{"effect":"idempotent","revision":"orders-v1"}}}}`),
		[]byte(`{"v":1,"session":"s-12","epoch":1,"at":"2026-11-30T10:00:00.223456789Z","type":"tool.started","started":{"call_id":"c-1234"}}`),
		[]byte(`{"v":1,"session":"s-12","epoch":1,"at":"2026-11-30T10:00:00.323456789Z","type":"tool.result","result":{"call_id":"c-1234","status":"ok","retryable":false,"output":{"order_id":"o-1"}}}`),
	}
	for b.Loop() {
		for _, l := range lines {
			if _, err := schema.DecodeEvent(l); err != nil {
				b.Fatal(err)
			}
		}
	}
}
