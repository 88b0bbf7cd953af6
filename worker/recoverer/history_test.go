package recoverer

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// TestLoadHistoryMatchesLoad: the recoverer's loader of short logs returns
// what stream.Load returns (events, seqs, errors), also for the logs it
// leaves to Load.
func TestLoadHistoryMatchesLoad(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	r := e.recoverer("a")
	// Other sessions interleave with the ones read.
	short, long, other := e.writer("s-short", "w1"), e.writer("s-long", "w1"), e.writer("s-other", "w1")
	for i := range 2 * smallHistory {
		id := fmt.Sprintf("c-%d", i)
		for _, w := range []*writer{long, other} {
			w.call(id, "orders.create", effect.Idempotent, "k-"+id)
			w.result(id, schema.StatusOK, "")
		}
		if i == 0 {
			short.call(id, "orders.create", effect.Idempotent, "k-"+id)
			short.started(id)
			short.result(id, schema.StatusFailed, "")
		}
	}
	corrupt := e.writer("s-corrupt", "w1")
	corrupt.call("c-1", "orders.create", effect.Idempotent, "k-1")
	if _, err := e.topo.JS.Publish(ctx, e.topo.EventsSubject("s-corrupt"), []byte(`{"v":1,"type":"tool.result","type":"x"}`)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s-short", "s-long", "s-other", "s-corrupt", "s-empty", "bad session!"} {
		t.Run(s, func(t *testing.T) {
			want, wantErr := e.topo.Load(ctx, s)
			if s == "s-corrupt" && schema.CodeOf(wantErr) != schema.CodeCorruptHistory {
				t.Fatalf("Load of the corrupt log: %v, want corrupt_history", wantErr)
			}
			got, err := r.loadHistory(ctx, s)
			if schema.CodeOf(err) != schema.CodeOf(wantErr) || (err == nil) != (wantErr == nil) {
				t.Fatalf("loadHistory error %v, Load error %v", err, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("loadHistory = %d events, Load = %d events\n%+v\n%+v", len(got), len(want), got, want)
			}
		})
	}
}
