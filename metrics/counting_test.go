package metrics_test

import (
	"sync/atomic"
	"testing"

	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/schema"
)

// countingRecoverer is a fakeRecoverer that says whether it counts.
type countingRecoverer struct {
	fakeRecoverer
	on atomic.Bool
}

func (c *countingRecoverer) Counting() bool { return c.on.Load() }

// TestRecoveryCountsOnlyWhileCounting: a recovery worker that does not
// count (another holds the counting lease) keeps its series at 0 and says
// so in recoverer_counting; an assessment it saw then is not counted when
// it is published again after this worker took the counting over; plans
// and takeovers are counted either way.
func TestRecoveryCountsOnlyWhileCounting(t *testing.T) {
	reg := metrics.NewRegistry()
	m := metrics.NewRecovery(reg)
	src := &countingRecoverer{}
	m.Source(src)
	seen := schema.Assessment{Session: "s", CallID: "c-1", Evidence: "e1", Outcome: schema.OutcomeCompleted, Decision: schema.DecisionRefuse}
	m.Assessed(seen)
	m.ReviewJudged(schema.VerdictCompleted, "")
	m.ApprovalTimedOut("s", "c-9")
	m.PlanAnswered("")
	m.TookOver("s", nil, nil)
	want := func(name string, v float64) {
		t.Helper()
		got := scrapeRegistry(t, reg)
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	want(`jingwei_assessments_total{decision="refuse",outcome="completed"}`, 0)
	want(`jingwei_reviews_judged_total{result="accepted",verdict="completed"}`, 0)
	want("jingwei_approvals_timed_out_total", 0)
	want(`jingwei_plan_requests_total{result="issued"}`, 1)
	want("jingwei_takeovers_total", 1)
	want("jingwei_recoverer_counting", 0)

	src.on.Store(true)
	m.Assessed(seen) // published again: seen before, not counted now
	m.Assessed(schema.Assessment{Session: "s", CallID: "c-2", Evidence: "e2", Outcome: schema.OutcomeCompleted, Decision: schema.DecisionRefuse})
	m.ReviewJudged(schema.VerdictCompleted, "")
	m.ApprovalTimedOut("s", "c-8")
	want(`jingwei_assessments_total{decision="refuse",outcome="completed"}`, 1)
	want(`jingwei_reviews_judged_total{result="accepted",verdict="completed"}`, 1)
	want("jingwei_approvals_timed_out_total", 1)
	want("jingwei_recoverer_counting", 1)
}

// scrapeRegistry gathers reg: each counter's and gauge's value by
// "name{l1="v1",…}", labels in name order.
func scrapeRegistry(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			key := f.GetName()
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
