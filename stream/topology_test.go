package stream_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
)

func TestEnsureTopologyIdempotent(t *testing.T) {
	ctx := context.Background()
	_, nc, topo := streamtest.Start(t)
	l, err := topo.Logs().Fence(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	again, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := again.Logs().Load(ctx, "s-1"); err != nil || len(evs) != 1 || evs[0].Seq != l.LastSeq() {
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
	if got := topo.Names().EventsSubject("s-1"); got != "jw.events.s-1" {
		t.Fatal(got)
	}
	for _, name := range []string{"JW_REQUESTS", "JW_REVIEWS", "JW_PLANS", "JW_ASSESSMENTS", "KV_jw_leases", "KV_jw_plans", "KV_jw_budget"} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if st, _ := topo.LeaseBucket.Status(ctx); st.LimitMarkerTTL() == 0 {
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
	for _, cfg := range []natsnode.EmbeddedConfig{
		{Sync: "sometimes"}, {Listen: "nope"}, {Listen: "127.0.0.1:99999"},
	} {
		if _, err := natsnode.StartEmbedded(ctx, cfg); err == nil {
			t.Errorf("StartEmbedded(%+v) accepted", cfg)
		}
	}
}

// TestEnsureTopologyRefusesWeakened: a jingwei stream or bucket recreated
// without the protections jingwei relies on (deny delete, deny purge, the
// dedup window, direct gets) is refused, naming the setting and how to
// repair it; with Repair the stream is mended in place, its messages kept,
// and the protection then holds against a delete.
func TestEnsureTopologyRefusesWeakened(t *testing.T) {
	cases := []struct {
		name   string
		weaken func(*jetstream.StreamConfig)
		stream string
		field  string
	}{
		{"reviews allow deletes", func(c *jetstream.StreamConfig) { c.DenyDelete = false }, "XB_REVIEWS", "deny_delete"},
		{"events allow purges", func(c *jetstream.StreamConfig) { c.DenyPurge = false }, "XB_EVENTS", "deny_purge"},
		{"plans with a short dedup window", func(c *jetstream.StreamConfig) { c.Duplicates = time.Second }, "XB_PLANS", "duplicates"},
		{"events without direct gets", func(c *jetstream.StreamConfig) { c.AllowDirect = false }, "XB_EVENTS", "allow_direct"},
		{"assessments allow deletes", func(c *jetstream.StreamConfig) { c.DenyDelete = false }, "XB_ASSESSMENTS", "deny_delete"},
		{"requests allow purges", func(c *jetstream.StreamConfig) { c.DenyPurge = false }, "XB_REQUESTS", "deny_purge"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			_, nc, _ := streamtest.Start(t)
			js, _ := jetstream.New(nc)
			cfg := stream.TopologyConfig{Prefix: "xb"}
			topo, err := stream.EnsureTopology(ctx, js, cfg)
			if err != nil {
				t.Fatal(err)
			}
			// An attacker (or an old version) recreates the stream weaker.
			want := streamConfig(t, js, tc.stream)
			if err := js.DeleteStream(ctx, tc.stream); err != nil {
				t.Fatal(err)
			}
			weak := want
			tc.weaken(&weak)
			if _, err := js.CreateStream(ctx, weak); err != nil {
				t.Fatal(err)
			}
			subj := weak.Subjects[0][:len(weak.Subjects[0])-1] + "keep"
			if _, err := js.Publish(ctx, subj, []byte(`keep me`)); err != nil {
				t.Fatal(err)
			}
			_, err = stream.EnsureTopology(ctx, js, cfg)
			var ce *stream.ConflictError
			if !errors.Is(err, stream.ErrTopologyConflict) || !errors.As(err, &ce) || ce.Field != tc.field || ce.Repair == "" {
				t.Fatalf("err = %v, want a conflict on %s with a repair", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), ce.Repair) {
				t.Fatalf("error %q does not name %s and the repair", err, tc.field)
			}
			if got := streamConfig(t, js, tc.stream); !reflect.DeepEqual(got, weak) {
				t.Fatalf("refused stream was changed: %+v", got)
			}
			cfg.Repair = true
			if topo, err = stream.EnsureTopology(ctx, js, cfg); err != nil {
				t.Fatalf("repair: %v", err)
			}
			got := streamConfig(t, js, tc.stream)
			if !got.DenyDelete || !got.DenyPurge || !got.AllowDirect || got.Duplicates < want.Duplicates {
				t.Fatalf("repaired stream lacks a protection: %+v", got)
			}
			s, _ := js.Stream(ctx, tc.stream)
			info, _ := s.Info(ctx)
			if info.State.Msgs != 1 {
				t.Fatalf("repair lost messages: %d", info.State.Msgs)
			}
			if err := s.DeleteMsg(ctx, info.State.LastSeq); err == nil {
				t.Fatal("a message of the repaired stream could be deleted")
			}
			_ = topo
		})
	}
}

// TestEnsureTopologyRefusesWeakenedBucket: a jingwei bucket whose stream
// allows message deletes is refused too.
func TestEnsureTopologyRefusesWeakenedBucket(t *testing.T) {
	ctx := context.Background()
	_, nc, _ := streamtest.Start(t)
	js, _ := jetstream.New(nc)
	cfg := stream.TopologyConfig{Prefix: "xc"}
	if _, err := stream.EnsureTopology(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	sc := streamConfig(t, js, "KV_xc_plans")
	if err := js.DeleteStream(ctx, "KV_xc_plans"); err != nil {
		t.Fatal(err)
	}
	sc.DenyDelete = false
	if _, err := js.CreateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	_, err := stream.EnsureTopology(ctx, js, cfg)
	var ce *stream.ConflictError
	if !errors.As(err, &ce) || ce.Stream != "KV_xc_plans" || ce.Field != "deny_delete" {
		t.Fatalf("err = %v, want deny_delete conflict on KV_xc_plans", err)
	}
	cfg.Repair = true
	if _, err := stream.EnsureTopology(ctx, js, cfg); err != nil {
		t.Fatalf("repair: %v", err)
	}
	if !streamConfig(t, js, "KV_xc_plans").DenyDelete {
		t.Fatal("bucket not repaired")
	}
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.Config
}

// TestSessionOf: SessionOf reads the session token of event and stored
// request subjects as splitting the subject on its dots does, for
// well-formed and malformed subjects alike, and allocates nothing.
func TestSessionOf(t *testing.T) {
	split := func(subject string) string {
		parts := strings.Split(subject, ".")
		switch {
		case len(parts) == 3:
			return parts[2]
		case len(parts) == 4 && parts[2] != "" && strings.Trim(parts[2], "0123456789") == "":
			return parts[3]
		}
		return ""
	}
	for _, s := range []string{"jw.events.s-1", "p.events.s-1", "jw.requests.7.s-1", "jw.requests.x7.s-1", "jw.requests..s-1", "jw.events", "jw", "", "jw.events.", "a.b.c.d.e", "jw.requests.12.", "..", "...", "jw.requests.٣.s-1"} {
		if got, want := stream.SessionOf(s), split(s); got != want {
			t.Errorf("SessionOf(%q) = %q, want %q", s, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = stream.SessionOf("jw.requests.7.s-1") }); n != 0 {
		t.Errorf("SessionOf allocates %.0f times", n)
	}
}
