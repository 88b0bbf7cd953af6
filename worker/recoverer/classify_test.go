package recoverer

import (
	"encoding/json"
	"testing"

	"github.com/jingwei/jingwei/bench/histgen"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestIncrementalMatchesInspect feeds generated histories (every status,
// rejections, retries, takeovers, unknown event types) through the
// incremental classifier and checks each assessment it builds equals
// recovery.Inspect's on the history as it stood at that event.
func TestIncrementalMatchesInspect(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		h := histgen.Generate(histgen.Config{Session: "s-gen", Events: 600, Seed: seed})
		tr := newTracker()
		var fast, loaded int
		for i, ev := range h.Events {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			found, err := tr.observe("s-gen", ev.Seq, b, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				want, err := recovery.Inspect(schema.Events(h.Events[:i+1]), f.callID)
				if !f.ready {
					loaded++
					continue // a retry or an unknown call: Inspect is what runs
				}
				fast++
				if err != nil {
					t.Fatalf("seed %d seq %d: Inspect(%s): %v", seed, ev.Seq, f.callID, err)
				}
				assertSame(t, f.a, want)
			}
		}
		if fast == 0 || loaded == 0 {
			t.Fatalf("seed %d: %d incremental and %d loaded assessments; the generator should give both", seed, fast, loaded)
		}
		seen, open := tr.counts()
		if seen != uint64(len(h.Events)) || open > 1 {
			t.Fatalf("seed %d: seen %d of %d events, %d calls still tracked", seed, seen, len(h.Events), open)
		}
	}
}
