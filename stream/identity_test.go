package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestIdentitySurvivesRestartAndSetup: the identity setup records still
// matches after the server restarts and after setup runs again; a stream
// deleted and created again does not (a protected stream cannot lose
// messages from its start otherwise: deny purge cannot be lifted), and
// setup running again does not make it match; ConfirmIdentity does.
func TestIdentitySurvivesRestartAndSetup(t *testing.T) {
	srv, nc, topo := streamtest.StartRestartable(t, stream.TopologyConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := jetstream.New(nc)
	check := func(want ...string) {
		t.Helper()
		ps, err := stream.CheckIdentity(ctx, js, "")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.Stream)
		}
		if len(got) != len(want) || (len(want) > 0 && got[0] != want[0]) {
			t.Fatalf("replaced %v, want %v", ps, want)
		}
		if err := stream.ReplacedError(ps); (len(want) > 0) != (schema.CodeOf(err) == schema.CodeStreamReplaced) {
			t.Fatalf("ReplacedError = %v", err)
		}
	}
	if _, err := js.Publish(ctx, topo.Names().ReviewsSubject("s-1"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	check()
	srv.Restart()
	check()
	if _, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	check()

	// The plans bucket deleted and created again by setup.
	if err := js.DeleteKeyValue(ctx, "jw_plans"); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	check("KV_jw_plans")
	srv.Restart()
	check("KV_jw_plans")
	if _, err := stream.ConfirmIdentity(ctx, js, "", 1, "KV_jw_plans"); err != nil {
		t.Fatal(err)
	}
	check()

	// The record itself deleted: nothing matches until setup records it
	// again.
	if err := js.DeleteStream(ctx, stream.IdentityStreamName("")); err != nil {
		t.Fatal(err)
	}
	check(stream.IdentityStreamName(""))
}
