package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jingwei/jingwei/schema"
)

// Console is the review console's metrics: what it signed and asked for.
// Its methods may be called on a nil *Console (no metrics). Safe for
// concurrent use.
type Console struct {
	reviews *prometheus.CounterVec
	plans   *prometheus.CounterVec
}

// NewConsole registers the console's metrics on reg.
func NewConsole(reg prometheus.Registerer) *Console {
	c := &Console{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "console_reviews_total",
			Help: "Reviews the console signed, by verdict and result: accepted, ignored (published, but the recovery worker ignores it), refused (nothing published), unjudged (published, no answer on how it is judged).",
		}, []string{"verdict", "result"}),
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "console_plan_requests_total",
			Help: "Retry plans the console asked for, by result: issued, or the refusal's code (completed, needs_review, ...).",
		}, []string{"result"}),
	}
	reg.MustRegister(c.reviews, c.plans)
	return c
}

// Reviewed counts a review of verdict with its result ("accepted",
// "ignored", "refused", "unjudged").
func (c *Console) Reviewed(verdict schema.Verdict, result string) {
	if c == nil {
		return
	}
	if !verdict.Valid() {
		verdict = "other"
	}
	c.reviews.WithLabelValues(string(verdict), result).Inc()
}

// Prepared counts a plan request: code "" for a plan issued, else the
// refusal's code.
func (c *Console) Prepared(code schema.Code) {
	if c == nil {
		return
	}
	result := "issued"
	if code != "" {
		result = string(code)
		if len(result) > 64 {
			result = "other"
		}
	}
	c.plans.WithLabelValues(result).Inc()
}
