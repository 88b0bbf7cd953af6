package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/prober"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// reviewMetrics are the recovery worker's counts of reviews by where they
// came from (a person or a probe).
type reviewMetrics struct {
	reviews   *prometheus.CounterVec
	settled   *prometheus.CounterVec
	toVerdict *prometheus.HistogramVec
}

func newReviewMetrics() reviewMetrics {
	return reviewMetrics{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "reviews_total",
			Help: "Reviews the recovery worker judged, by source (person: a reviewer key; probe: an automated review by a prober key), verdict and whether it was accepted.",
		}, []string{"source", "verdict", "accepted"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "calls_settled_total",
			Help: "Uncertain calls settled by an accepted completed or not_executed review, by who settled them (person or probe) and verdict.",
		}, []string{"by", "verdict"}),
		toVerdict: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "review_verdict_seconds",
			Help:    "Time from the call's needs_review assessment (as this process first saw it) to the review that settled it, by who settled it (person or probe).",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600},
		}, []string{"by"}),
	}
}

func (r reviewMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.reviews, r.settled, r.toVerdict}
}

var _ recoverer.ReviewObserver = (*Recovery)(nil)

// Reviewed is recoverer.ReviewObserver's: it counts the review by source,
// and a settling one (accepted completed or not_executed) with the time
// since the call was first seen needs_review. Only while this worker is
// the one counting.
func (m *Recovery) Reviewed(rv schema.Review, accepted bool) {
	// Every recovery worker judges every review: only the one counting
	// counts it (see counting), so that a sum over workers is exact.
	if !m.counting() {
		return
	}
	acc := "false"
	if accepted {
		acc = "true"
	}
	m.rev.reviews.WithLabelValues(rv.Source(), string(rv.Verdict), acc).Inc()
	if !accepted || (rv.Verdict != schema.VerdictCompleted && rv.Verdict != schema.VerdictNotExecuted) {
		return
	}
	m.rev.settled.WithLabelValues(rv.Source(), string(rv.Verdict)).Inc()
	k := rv.Session + "/" + rv.CallID
	m.mu.Lock()
	since, ok := m.waiting[k]
	now := m.now()
	m.mu.Unlock()
	if ok {
		m.rev.toVerdict.WithLabelValues(rv.Source()).Observe(now.Sub(since).Seconds())
	}
}

// Prober is a prober's metrics: set its Observe as prober.Config.Observe.
// Safe for concurrent use.
type Prober struct {
	outcomes *prometheus.CounterVec
	took     *prometheus.HistogramVec
}

// NewProber registers a prober's metrics on reg.
func NewProber(reg prometheus.Registerer) *Prober {
	p := &Prober{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "probes_total",
			Help: "Uncertain calls the prober probed, by probe and outcome: settled (a completed or not_executed automated review published), undecided (evidence only: unknown, or a not_found that is not authoritative) or failed (every attempt failed or timed out; nothing published).",
		}, []string{"probe", "outcome", "verdict"}),
		took: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "probe_seconds",
			Help:    "Time from the prober taking up an uncertain call to its automated review (or to giving up), by probe and outcome.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"probe", "outcome"}),
	}
	reg.MustRegister(p.outcomes, p.took)
	return p
}

// Observe is prober.Config.Observe.
func (p *Prober) Observe(o prober.Outcome) {
	p.outcomes.WithLabelValues(o.Probe, string(o.Kind), string(o.Verdict)).Inc()
	p.took.WithLabelValues(o.Probe, string(o.Kind)).Observe(o.Took.Seconds())
}
