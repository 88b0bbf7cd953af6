package stream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

func TestEnsureTopologyIdempotent(t *testing.T) {
	ctx := context.Background()
	_, nc, topo := streamtest.Start(t)
	l, err := topo.Fence(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	again, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := again.Load(ctx, "s-1"); err != nil || len(evs) != 1 || evs[0].Seq != l.LastSeq() {
		t.Fatalf("history after a second EnsureTopology: %v %v", evs, err)
	}
	info, err := again.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.Name != "JW_EVENTS" || c.MaxAge != 0 || c.Storage != jetstream.FileStorage || c.Duplicates != 2*time.Minute || !c.DenyPurge || !c.DenyDelete {
		t.Fatalf("JW_EVENTS config %+v", c)
	}
	if got := topo.EventsSubject("s-1"); got != "jw.events.s-1" {
		t.Fatal(got)
	}
	for _, name := range []string{"JW_REQUESTS", "JW_REVIEWS", "JW_PLANS", "JW_ASSESSMENTS", "KV_jw_leases", "KV_jw_plans", "KV_jw_budget"} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if st, _ := topo.Leases.Status(ctx); st.LimitMarkerTTL() == 0 {
		t.Error("jw_leases has no LimitMarkerTTL")
	}
}

// TestEnsureTopologyConflict: an existing stream with conflicting settings
// is reported and left alone, with its messages.
func TestEnsureTopologyConflict(t *testing.T) {
	cases := []struct {
		name  string
		cfg   jetstream.StreamConfig
		field string
	}{
		{"max age on the logs", jetstream.StreamConfig{Name: "XA_EVENTS", Subjects: []string{"xa.events.*"}, Storage: jetstream.FileStorage, MaxAge: time.Hour}, "max_age"},
		{"other subjects", jetstream.StreamConfig{Name: "XA_EVENTS", Subjects: []string{"xa.events.>"}, Storage: jetstream.FileStorage}, "subjects"},
		{"memory storage", jetstream.StreamConfig{Name: "XA_EVENTS", Subjects: []string{"xa.events.*"}, Storage: jetstream.MemoryStorage}, "storage"},
		{"limits instead of work queue", jetstream.StreamConfig{Name: "XA_REQUESTS", Subjects: []string{"xa.requests.*"}, Storage: jetstream.FileStorage}, "retention"},
		{"subjects taken by another stream", jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"xa.reviews.>"}, Storage: jetstream.FileStorage}, "subjects"},
		{"one replica where three are wanted", jetstream.StreamConfig{Name: "XA_EVENTS", Subjects: []string{"xa.events.*"}, Storage: jetstream.FileStorage, Replicas: 1}, "replicas"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			_, nc, _ := streamtest.Start(t)
			js, _ := jetstream.New(nc)
			s, err := js.CreateStream(ctx, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			subj := tc.cfg.Subjects[0]
			if len(subj) > 0 && (subj[len(subj)-1] == '*' || subj[len(subj)-1] == '>') {
				subj = subj[:len(subj)-1] + "keep"
			}
			if _, err := js.Publish(ctx, subj, []byte("keep me")); err != nil {
				t.Fatal(err)
			}
			cfg := stream.TopologyConfig{Prefix: "xa"}
			if tc.field == "replicas" {
				cfg.Replicas = 3
			}
			_, err = stream.EnsureTopology(ctx, js, cfg)
			var ce *stream.ConflictError
			if !errors.Is(err, stream.ErrTopologyConflict) || !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("err = %v, want conflict on %s", err, tc.field)
			}
			info, err := s.Info(ctx)
			if err != nil || info.State.Msgs != 1 || info.Config.MaxAge != tc.cfg.MaxAge {
				t.Fatalf("existing stream changed: %+v %v", info, err)
			}
		})
	}
}

func TestOpenTopology(t *testing.T) {
	ctx := context.Background()
	_, nc, _ := streamtest.Start(t)
	js, _ := jetstream.New(nc)
	if _, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{}); err != nil {
		t.Fatalf("existing topology: %v", err)
	}
	if _, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{Prefix: "other"}); !errors.Is(err, stream.ErrNoTopology) {
		t.Fatalf("missing topology: %v", err)
	}
	if _, err := js.Stream(ctx, "OTHER_EVENTS"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("OpenTopology created a stream: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	ctx := context.Background()
	_, nc, _ := streamtest.Start(t)
	js, _ := jetstream.New(nc)
	for _, cfg := range []stream.TopologyConfig{
		{Prefix: "a.b"}, {Replicas: 7}, {LeaseTTL: time.Millisecond}, {LeaseMarkerTTL: 10 * time.Millisecond},
	} {
		if _, err := stream.EnsureTopology(ctx, js, cfg); err == nil {
			t.Errorf("EnsureTopology(%+v) accepted", cfg)
		}
	}
	for _, cfg := range []stream.EmbeddedConfig{
		{Sync: "sometimes"}, {Listen: "nope"}, {Listen: "127.0.0.1:99999"},
	} {
		if _, err := stream.StartEmbedded(ctx, cfg); err == nil {
			t.Errorf("StartEmbedded(%+v) accepted", cfg)
		}
	}
}
