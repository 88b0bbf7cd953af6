package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestRequestQueueFlushesAsync: on one server the request queue is made
// with the async persist mode (its store and its removal on acknowledgement
// are not fsynced one by one with sync always; the tool.call is the
// durable record), every other stream with the default; a request the
// server acknowledged survives a restart (a clean shutdown flushes it);
// and a queue an older jingwei made with the default mode is accepted as
// it is.
func TestRequestQueueFlushesAsync(t *testing.T) {
	ctx := context.Background()
	r, nc, topo := streamtest.StartRestartable(t, stream.TopologyConfig{})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"JW_REQUESTS", "JW_EVENTS", "JW_ANSWERS", "JW_PLANS", "JW_REVIEWS", "JW_ASSESSMENTS"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		want := jetstream.DefaultPersistMode
		if name == "JW_REQUESTS" {
			want = jetstream.AsyncPersistMode
		}
		if got := s.CachedInfo().Config.PersistMode; got != want {
			t.Errorf("%s: persist mode %s, want %s", name, got, want)
		}
	}
	if _, err := js.Publish(ctx, topo.Names().RequestsSubject("s-1"), []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	r.Restart()
	s, err := js.Stream(ctx, "JW_REQUESTS")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("JW_REQUESTS holds %d messages after a restart, want 1", n)
	}

	// An older deployment's queue (the default mode, which a stream keeps
	// for life) is taken as it is.
	old := stream.TopologyConfig{Prefix: "old"}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OLD_REQUESTS", Subjects: []string{"old.requests.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "old.requests.*", Destination: "old.requests.{{partition(32,1)}}.{{wildcard(1)}}"},
		Retention:        jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
		DenyDelete: true, DenyPurge: true, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.EnsureTopology(ctx, js, old); err != nil {
		t.Fatalf("a default-mode request queue refused: %v", err)
	}
}
