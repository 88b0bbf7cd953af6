package histgen

import (
	"bytes"
	"testing"

	"github.com/jingwei/jingwei/schema"
)

func TestGenerateDefaultFitsTheLimits(t *testing.T) {
	h := Generate(Config{})
	if len(h.Events) != schema.MaxHistoryEvents {
		t.Fatalf("%d events, want %d", len(h.Events), schema.MaxHistoryEvents)
	}
	if len(h.JSONL) > schema.MaxHistoryBytes {
		t.Fatalf("%d bytes, over the %d-byte limit", len(h.JSONL), schema.MaxHistoryBytes)
	}
	if h.LastCall == "" || h.Calls[len(h.Calls)-1] != h.LastCall {
		t.Errorf("LastCall %q, last of Calls %q", h.LastCall, h.Calls[len(h.Calls)-1])
	}
}

func TestGenerateDecodes(t *testing.T) {
	h := Generate(Config{Events: 5000, Session: "s-x", Seed: 7})
	evs, err := schema.DecodeHistory(bytes.NewReader(h.JSONL), schema.Limits{})
	if err != nil || len(evs) != 5000 {
		t.Fatalf("DecodeHistory: %d events, %v", len(evs), err)
	}
	counts := map[string]int{}
	retries, reviews, combined := 0, 0, 0
	for i, e := range evs {
		if e.Call != nil && e.Call.Started {
			combined++
			if e.Call.StartMarker {
				t.Fatalf("event %d: a combined call with a start marker", i)
			}
		}
		if e.Seq != uint64(i+1) || e.Session != "s-x" {
			t.Fatalf("event %d: seq %d session %q", i, e.Seq, e.Session)
		}
		counts[e.Type]++
		if e.Call != nil && e.Call.Operation.Retry != nil {
			retries++
			if e.Call.Operation.Retry.Review != nil {
				reviews++
			}
		}
	}
	for _, typ := range []string{schema.TypeCall, schema.TypeStarted, schema.TypeResult, "tool.progress"} {
		if counts[typ] == 0 {
			t.Errorf("no %s events: %v", typ, counts)
		}
	}
	if combined == 0 || combined == counts[schema.TypeCall] {
		t.Errorf("%d of %d calls in the combined form, want both forms", combined, counts[schema.TypeCall])
	}
	if retries == 0 || reviews == 0 {
		t.Errorf("%d retries, %d with a review", retries, reviews)
	}
	again := Generate(Config{Events: 5000, Session: "s-x", Seed: 7})
	if !bytes.Equal(again.JSONL, h.JSONL) {
		t.Error("Generate is not deterministic")
	}
}
