package prober_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/prober"
	"github.com/jingwei/jingwei/worker/recoverer"
	"github.com/jingwei/jingwei/worker/service"
)

// TestMetricsSayWhoSettled: a call settled by the probe counts as settled
// by a probe (with its time from assessment to verdict), the prober counts
// its settled probe, and no call is counted as settled by a person.
func TestMetricsSayWhoSettled(t *testing.T) {
	reg := prometheus.NewRegistry()
	rm := metrics.NewRecovery(reg)
	e := setup(t, func(c *recoverer.Config) { c.Observer = rm })
	pm := metrics.NewProber(reg)
	e.startProber(func(c *prober.Config) { c.Observe = pm.Observe })
	callID, resume := e.frozenCharge(true)
	defer func() { _ = resume() }()
	e.deciding(callID, "the probe's completed is accepted", func(c service.ReviewCheck) bool {
		return c.Decides && c.Review.Verdict == schema.VerdictCompleted
	})
	streamtest.Eventually(t, 10*time.Second, "the metrics count the probe's settlement", func() bool {
		return value(t, reg, "jingwei_calls_settled_total", `by="probe",verdict="completed"`) == 1 &&
			value(t, reg, "jingwei_probes_total", `outcome="settled",probe="payments.lookup",verdict="completed"`) == 1
	})
	if n := value(t, reg, "jingwei_calls_settled_total", `by="person",verdict="completed"`); n != 0 {
		t.Fatalf("settled by a person: %v, want 0", n)
	}
	if n := value(t, reg, "jingwei_review_verdict_seconds", `by="probe"`); n != 1 {
		t.Fatalf("review_verdict_seconds{by=probe} count: %v, want 1", n)
	}
}

// value is the value of the series of name whose labels read labels
// (sorted, as name="value" pairs joined by commas): a counter's value, a
// histogram's count; 0 when there is none.
func value(t *testing.T, reg *prometheus.Registry, name, labels string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if strings.Join(ls, ",") != labels {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
		}
	}
	return 0
}
