package stream_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// The partition the server's subject transform files a request under is
// the one Partition computes, for every session of a sample and for
// several partition counts; plans are filed alike.
func TestPartitionMatchesServerTransform(t *testing.T) {
	for _, n := range []int{1, 7, 32} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ctx := context.Background()
			_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{Partitions: n}})
			want := map[string]int{}
			for i := range 300 {
				s := fmt.Sprintf("sess-%d_%x", i, i*7919)
				if i%50 == 0 {
					s = strings.Repeat("Z", 1+i%128)
				}
				want[s] = stream.Partition(s, n)
				if _, err := topo.JS.Publish(ctx, topo.Names().RequestsSubject(s), []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := topo.JS.Publish(ctx, topo.Names().PlansSubject("sess-1_1ecf"), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			info, err := topo.Requests.Info(ctx, jetstream.WithSubjectFilter(">"))
			if err != nil {
				t.Fatal(err)
			}
			if len(info.State.Subjects) != len(want) {
				t.Fatalf("%d stored subjects, want %d", len(info.State.Subjects), len(want))
			}
			for subj := range info.State.Subjects {
				parts := strings.Split(subj, ".")
				if len(parts) != 4 {
					t.Fatalf("stored subject %s", subj)
				}
				s, p := parts[3], parts[2]
				if w, ok := want[s]; !ok || strconv.Itoa(w) != p {
					t.Errorf("server filed %s under partition %s, Partition says %d", s, p, w)
				}
				if subj != topo.Names().RequestsStoredSubject(s) || stream.SessionOf(subj) != s {
					t.Errorf("stored subject %s, RequestsStoredSubject %s", subj, topo.Names().RequestsStoredSubject(s))
				}
			}
			if n, err := topo.Plans().PlanMessage(ctx, "sess-1_1ecf", "none"); err != nil || n != 0 {
				t.Fatalf("PlanMessage on the stored plan subject: %d %v", n, err)
			}
			pinfo, err := topo.PlanLog.Info(ctx, jetstream.WithSubjectFilter(topo.Names().PlansStoredSubject("sess-1_1ecf")))
			if err != nil || pinfo.State.Msgs != 1 {
				t.Fatalf("plan not stored under %s: %+v %v", topo.Names().PlansStoredSubject("sess-1_1ecf"), pinfo.State, err)
			}
		})
	}
}

// Every process of a deployment must agree on the partitions and the
// lease TTL: EnsureTopology refuses another value, naming the setting
// and both values; OpenTopology takes both from the server.
func TestTopologyRefusesOtherPartitionsAndLeaseTTL(t *testing.T) {
	ctx := context.Background()
	_, nc, _ := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{Partitions: 8, LeaseTTL: 3 * time.Second}})
	js, _ := jetstream.New(nc)
	for _, tc := range []struct {
		cfg         stream.TopologyConfig
		field       string
		have, wants string
	}{
		{stream.TopologyConfig{Partitions: 16, LeaseTTL: 3 * time.Second}, "partitions", "8", "16"},
		{stream.TopologyConfig{Partitions: 8, LeaseTTL: 10 * time.Second}, "lease_ttl", "3s", "10s"},
		{stream.TopologyConfig{Partitions: 8}, "lease_ttl", "3s", "10s"},
	} {
		_, err := stream.EnsureTopology(ctx, js, tc.cfg)
		var ce *stream.ConflictError
		if !errors.As(err, &ce) || ce.Field != tc.field || ce.Have != tc.have || !strings.HasPrefix(ce.Want, tc.wants) {
			t.Fatalf("%+v: err %v, want a conflict on %s (%s → %s)", tc.cfg, err, tc.field, tc.have, tc.wants)
		}
		if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.have) || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("error %q does not name %s and both values", err, tc.field)
		}
	}
	if _, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{Partitions: 8, LeaseTTL: 3 * time.Second}); err != nil {
		t.Fatalf("same settings: %v", err)
	}
	ro, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if ro.Names().Partitions() != 8 || ro.Config().LeaseTTL != 3*time.Second {
		t.Fatalf("OpenTopology: %d partitions, lease TTL %s; want 8 and 3s", ro.Names().Partitions(), ro.Config().LeaseTTL)
	}
}

// A partition's lease is held by one owner at a time; a later owner's
// epoch is above the earlier one's and above the recovery epoch between
// them; a lost lease ends the hold and its session holds; an expiry is
// reported; Raise moves the epoch above a log's.
func TestPartitionLease(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{Partitions: 4, LeaseTTL: time.Second}})
	expired, err := topo.Leases().WatchPartitionExpiry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, err := topo.Leases().AcquirePartition(ctx, 1, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Leases().AcquirePartition(ctx, 1, "b", nil); !errors.Is(err, stream.ErrLeaseHeld) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("second acquire: %v, want held by a", err)
	}
	if _, err := topo.Leases().AcquirePartition(ctx, 4, "b", nil); err == nil {
		t.Fatal("partition 4 of 4 acquired")
	}
	var s string
	for i := 0; ; i++ {
		if s = fmt.Sprintf("s-%d", i); topo.Names().PartitionOf(s) == 1 {
			break
		}
	}
	if _, err := topo.Leases().ConfirmIn(ctx, a, "other-partition-"+s); err == nil && topo.Names().PartitionOf("other-partition-"+s) != 1 {
		t.Fatal("ConfirmIn accepted a session of another partition")
	}
	tk, err := topo.Leases().ConfirmIn(ctx, a, s)
	if err != nil || tk.Resumed || tk.Hold.Epoch() != a.Epoch() {
		t.Fatalf("confirm: %+v %v", tk, err)
	}
	// Confirmed again by the same hold: no second fence.
	tk2, err := topo.Leases().ConfirmIn(ctx, a, s)
	if err != nil || !tk2.Resumed {
		t.Fatalf("confirm again: %+v %v, want resumed", tk2, err)
	}
	if h, _ := topo.Logs().Load(ctx, s); len(h) != 1 {
		t.Fatalf("log %d events, want the one fence", len(h))
	}
	if lv, ok, err := topo.Logs().Writer(ctx, s); err != nil || !ok || lv.Owner != "a" {
		t.Fatalf("writer %+v %v %v, want a", lv, ok, err)
	}
	if _, err := topo.Leases().RecoveryHolds().Acquire(ctx, s, "rec"); !errors.Is(err, stream.ErrLeaseHeld) {
		t.Fatalf("recovery hold under a live owner: %v", err)
	}
	// a stops renewing: the hold fails by a's clock, the server expires
	// the lease and says so.
	streamtest.Eventually(t, 3*time.Second, "hold failed by the local clock", func() bool { return a.Err() != nil })
	if !errors.Is(tk.Hold.Err(), stream.ErrHoldLost) || !errors.Is(tk.Hold.Err(), stream.ErrFenced) {
		t.Fatalf("session hold after the partition's: %v", tk.Hold.Err())
	}
	if _, err := tk.Log.Append(ctx, schema.Event{V: 1, Session: s, Type: "x.test"}); err == nil {
		t.Fatal("append after the hold failed")
	}
	select {
	case p := <-expired:
		if p != 1 {
			t.Fatalf("expired %d, want 1", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("expiry not reported")
	}
	// The recovery worker fences at a's epoch + 1; the next owner is above.
	rh, err := topo.Leases().RecoveryHolds().Acquire(ctx, s, "rec")
	if err != nil || rh.Epoch() != a.Epoch()+1 {
		t.Fatalf("recovery hold %v %v, want epoch %d", rh, err, a.Epoch()+1)
	}
	if _, err := topo.Leases().Confirm(ctx, rh); err != nil {
		t.Fatal(err)
	}
	b, err := topo.Leases().AcquirePartition(ctx, 1, "b", nil)
	if err != nil || b.Epoch() <= rh.Epoch() {
		t.Fatalf("b: %v %v, want an epoch above %d", b, err, rh.Epoch())
	}
	if tk, err := topo.Leases().ConfirmIn(ctx, b, s); err != nil || tk.Resumed {
		t.Fatalf("b confirms: %+v %v", tk, err)
	}
	// A writer outside the partitions fences the log higher: b raises its
	// epoch above the log's and confirms again.
	if _, err := topo.Logs().Fence(ctx, s, "outside", b.Epoch()+10); err != nil {
		t.Fatal(err)
	}
	tk3, err := topo.Leases().ConfirmIn(ctx, b, s)
	if err != nil || tk3.Hold.Epoch() <= b.Base()+10 || b.Epoch() != tk3.Hold.Epoch() {
		t.Fatalf("confirm above an outside fence: %+v %v (b at %d)", tk3, err, b.Epoch())
	}
	h, err := topo.Logs().Load(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for _, ev := range h {
		if ev.Epoch < last {
			t.Fatalf("epoch %d after %d on the log", ev.Epoch, last)
		}
		last = ev.Epoch
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := topo.Leases().PartitionHolder(ctx, 1); ok {
		t.Fatal("lease live after release")
	}
	leases, err := topo.Leases().PartitionLeases(ctx)
	if err != nil || len(leases) != 0 {
		t.Fatalf("partition leases %v %v, want none", leases, err)
	}
}

// The worker registry lists the live registrations and forgets one that
// is released or not renewed within the TTL.
func TestWorkerRegistry(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	a, err := topo.Leases().RegisterWorker(ctx, "tw-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := topo.Leases().RegisterWorker(ctx, "tw.b*")
	if err != nil {
		t.Fatal(err)
	}
	if live, err := topo.Leases().LiveWorkers(ctx); err != nil || len(live) != 2 || live[0] != "tw-a" || live[1] != "tw.b*" {
		t.Fatalf("live %v %v", live, err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if live, _ := topo.Leases().LiveWorkers(ctx); len(live) != 1 {
		t.Fatalf("live after release %v", live)
	}
	_ = a
	streamtest.Eventually(t, 5*time.Second, "unrenewed registration gone", func() bool {
		live, err := topo.Leases().LiveWorkers(ctx)
		return err == nil && len(live) == 0
	})
}
