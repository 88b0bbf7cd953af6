package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// requestTap counts the requests and publications the recoverers send to
// the server, by kind: a plain subscriber on the JetStream API and on the
// plans subjects gets a copy of each.
type requestTap struct {
	nc     *nats.Conn
	subs   []*nats.Subscription
	mu     sync.Mutex
	counts map[string]int
	added  int64 // messages counted, over every subscription (mu held)
}

func tapRequests(tb testing.TB, srv *natsnode.Embedded, topo *stream.Topology) *requestTap {
	tb.Helper()
	nc, err := srv.Connect()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	tap := &requestTap{nc: nc, counts: map[string]int{}}
	plans := strings.TrimSuffix(topo.Names().PlansSubject("x"), "x")
	for _, subj := range []string{"$JS.API.>", "$KV.>", plans + ">"} {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) { tap.add(requestKind(m.Subject, plans)) })
		if err != nil {
			tb.Fatal(err)
		}
		tap.subs = append(tap.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	return tap
}

// requestKind names a request by its API verb and stream (or bucket).
func requestKind(subj, plans string) string {
	if strings.HasPrefix(subj, plans) {
		return "publish " + plans + "…"
	}
	if strings.HasPrefix(subj, "$KV.") {
		return "publish $KV." + strings.Split(subj, ".")[1] + " (create)"
	}
	parts := strings.Split(strings.TrimPrefix(subj, "$JS.API."), ".")
	switch {
	case len(parts) >= 3 && parts[0] == "DIRECT" && parts[1] == "GET":
		if len(parts) > 3 {
			return "DIRECT.GET " + parts[2] + " (by subject)"
		}
		return "DIRECT.GET " + parts[2]
	case len(parts) >= 4 && parts[0] == "STREAM" && parts[1] == "MSG":
		return "STREAM.MSG." + parts[2] + " " + parts[3]
	case len(parts) >= 3 && parts[0] == "CONSUMER":
		return "CONSUMER." + parts[1] + " " + parts[2]
	case len(parts) >= 3:
		return parts[0] + "." + parts[1] + " " + parts[2]
	}
	return subj
}

func (t *requestTap) add(kind string) {
	t.mu.Lock()
	t.counts[kind]++
	t.added++
	t.mu.Unlock()
}

// reset returns the counts so far and starts again from zero, once the
// copies of everything sent before it have been counted: after the flush
// every copy has reached the tap's connection, and each is counted once
// no subscription holds one pending and every one handed to a callback
// (Delivered) has been added — a copy being handled is neither pending
// nor counted yet.
func (t *requestTap) reset() map[string]int {
	_ = t.nc.Flush()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		var pending, delivered int64
		for _, s := range t.subs {
			n, _, _ := s.Pending()
			d, _ := s.Delivered()
			pending, delivered = pending+int64(n), delivered+d
		}
		t.mu.Lock()
		added := t.added
		t.mu.Unlock()
		if pending == 0 && added == delivered {
			break
		}
		runtime.Gosched()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.counts
	t.counts = map[string]int{}
	return c
}

// report logs the counts per prepare.
func (t *requestTap) report(tb testing.TB, name string, counts map[string]int, prepares int) {
	kinds := make([]string, 0, len(counts))
	total := 0
	for k, n := range counts {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %.2f requests per prepare (%d prepares)\n", name, float64(total)/float64(prepares), prepares)
	for _, k := range kinds {
		fmt.Fprintf(&b, "  %-60s %.2f\n", k, float64(counts[k])/float64(prepares))
	}
	tb.Log(b.String())
}

// fillUncertain writes n sessions <name>-<i>, each with one call c-1 of an
// idempotent tool that failed after it started (retry_allowed), as
// `jingwei bench`'s issue scenario does.
func fillUncertain(tb testing.TB, topo *stream.Topology, name string, n int) []string {
	tb.Helper()
	ctx := context.Background()
	contract := effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}
	out := make([]string, n)
	for i := range out {
		s := fmt.Sprintf("%s-%d", name, i)
		lg, err := topo.Logs().OpenLog(ctx, s, "bench-writer", 1)
		if err != nil {
			tb.Fatal(err)
		}
		for _, ev := range []schema.Event{
			{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), StartMarker: true,
				Operation: &schema.Operation{Task: "t-1", Key: fmt.Sprintf("op-%032d", i), Contract: contract}}},
			{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}},
			{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusFailed, Retryable: true, Error: "upstream 503"}},
		} {
			if _, err := lg.Append(ctx, ev); err != nil {
				tb.Fatal(err)
			}
		}
		out[i] = s
	}
	return out
}

// BenchmarkPrepareRequests is the profile harness of plan issuance (issue
// 16): per b.N round, four recoverers (each on its own connection) race
// through the prepares of 100 fresh retry_allowed calls, then one
// recoverer prepares 100 more alone, then asks again for the plans it
// issued (the "issued before" path). It reports plans/s of each part and
// of the raw operations of the racing part (as `jingwei bench` runs them:
// KV create, the winner's publish, the losers' KV get), the ratio, and
// logs the requests each part sent per prepare, by kind (-v). Run with
// -cpuprofile for where the recoverer's CPU goes.
func BenchmarkPrepareRequests(b *testing.B) {
	const (
		racers = 4
		calls  = 100
	)
	srv, _, topo := streamtest.StartWith(b, streamtest.Config{})
	ctx := context.Background()
	recs := make([]*Recoverer, racers)
	planner := newPlanner(b)
	for i, ti := range racerTopologies(b, srv, topo, racers) {
		var err error
		if recs[i], err = New(Config{Topology: ti, Name: fmt.Sprintf("issuer%d", i), DisableService: true, PlannerKey: planner}); err != nil {
			b.Fatal(err)
		}
	}
	tap := tapRequests(b, srv, topo)
	value := make([]byte, 700) // a signed plan record
	rawRace := func(n int) time.Duration {
		return race(b, racers, func(i int) error {
			t := recs[i].t
			for j := range calls {
				id := fmt.Sprintf("raw-%d-%d", n, j)
				_, err := t.PlanBucket.Create(ctx, id, value)
				switch {
				case err == nil:
					_, err = t.JS.Publish(ctx, topo.Names().PlansSubject(id), value[:500], jetstream.WithMsgID(id))
				case errors.Is(err, jetstream.ErrKeyExists):
					_, err = t.PlanBucket.Get(ctx, id)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	// prepareAll has rec prepare c-1 of every session, in order.
	prepareAll := func(rec *Recoverer, sessions []string) error {
		for _, s := range sessions {
			if _, err := rec.Prepare(ctx, s, "c-1"); err != nil {
				return err
			}
		}
		return nil
	}
	// aloneRate has one recoverer prepare every session alone; it
	// returns the prepares per second.
	aloneRate := func(rec *Recoverer, sessions []string) float64 {
		var err error
		d := timed(func() { err = prepareAll(rec, sessions) })
		if err != nil {
			b.Fatal(err)
		}
		return float64(len(sessions)) / d.Seconds()
	}
	var raced, alone, again, raw float64
	var racedC, aloneC, againC map[string]int
	add := func(into *map[string]int, c map[string]int) {
		if *into == nil {
			*into = map[string]int{}
		}
		for k, n := range c {
			(*into)[k] += n
		}
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		racing := fillUncertain(b, topo, fmt.Sprintf("race%d", n), calls)
		single := fillUncertain(b, topo, fmt.Sprintf("alone%d", n), calls)
		tap.reset()
		b.StartTimer()

		d := race(b, racers, func(i int) error { return prepareAll(recs[i], racing) })
		raced += float64(calls) / d.Seconds()
		add(&racedC, tap.reset())
		raw += float64(calls) / rawRace(n).Seconds()
		tap.reset()

		alone += aloneRate(recs[0], single)
		add(&aloneC, tap.reset())

		again += aloneRate(recs[1], single)
		add(&againC, tap.reset())
	}
	b.StopTimer()
	b.ReportMetric(raced/float64(b.N), "raced_plans/s")
	b.ReportMetric(raw/float64(b.N), "raw_plans/s")
	b.ReportMetric(raced/raw, "ratio")
	b.ReportMetric(alone/float64(b.N), "alone_plans/s")
	b.ReportMetric(again/float64(b.N), "again_plans/s")
	tap.report(b, fmt.Sprintf("%d racing issuers (per issuer's prepare)", racers), racedC, racers*calls*b.N)
	tap.report(b, "one issuer alone", aloneC, calls*b.N)
	tap.report(b, "issued before", againC, calls*b.N)
}

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}
