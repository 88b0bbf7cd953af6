package metrics

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/recoverer"
	"github.com/jingwei/jingwei/worker/service"
)

// maxSeen is how many recent assessment ids Recovery remembers to count
// an assessment published twice once.
const maxSeen = 10_000

// RecoverySource is what Recovery reads at each scrape; *recoverer.Recoverer
// implements it.
type RecoverySource interface {
	// Status is the recovery worker's jw.api.status answer for session
	// ("" for all).
	Status(ctx context.Context, session string) (service.Status, error)
	// ConsumerLag is how far the classifier's consumer is behind.
	ConsumerLag(ctx context.Context) (pending, ackPending uint64, err error)
}

// CountingSource is what says, when the RecoverySource also implements it
// (*recoverer.Recoverer does), whether this recovery worker counts the
// work every recovery worker does alike: assessments_total,
// reviews_judged_total and approvals_timed_out_total grow only while it
// is true, so that a sum() over the recovery workers counts each once.
// Without it (or before Source), Recovery counts everything it is told.
type CountingSource interface {
	Counting() bool
}

// Recovery is the recovery worker's metrics: a recoverer.Observer (set it
// as recoverer.Config.Observer, then give it the recoverer with Source)
// and a collector of the recoverer's state at each scrape. Safe for
// concurrent use.
type Recovery struct {
	assessments *prometheus.CounterVec
	takeovers   prometheus.Counter
	crashToAsmt prometheus.Histogram
	plans       *prometheus.CounterVec
	reviews     *prometheus.CounterVec
	approvalsTO prometheus.Counter
	rev         reviewMetrics

	mu  sync.Mutex
	src RecoverySource
	// waiting holds when each call awaiting review was first seen
	// needs_review by this process (published, or listed at a scrape).
	waiting map[string]time.Time
	// seen and seenOrder are the latest maxSeen assessment ids counted.
	seen      map[string]struct{}
	seenOrder []string
	now       func() time.Time

	awaitingDesc, oldestDesc, openDesc, openOldestDesc, plansDesc, seenDesc, pendingDesc, ackPendingDesc, upDesc *prometheus.Desc
	approvalsDesc, stoppedDesc                                                                                   *prometheus.Desc
	replacedDesc, countingDesc                                                                                   *prometheus.Desc
}

// IdentitySource is what the stream_replaced gauge reads at each scrape,
// when the RecoverySource also implements it (*recoverer.Recoverer does).
type IdentitySource interface {
	// ProtectedStreams are the streams compared with their recorded
	// identity.
	ProtectedStreams() []string
	// ReplacedStreams are those that differed at the last comparison.
	ReplacedStreams() []stream.IdentityProblem
}

var _ recoverer.Observer = (*Recovery)(nil)

// NewRecovery registers the recovery worker's metrics on reg. The state
// gauges are collected once Source gave the recoverer.
func NewRecovery(reg prometheus.Registerer) *Recovery {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
	}
	m := &Recovery{
		assessments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "assessments_total",
			Help: "Distinct assessments the recovery workers published (one published again counts once), by outcome (completed, not_started, uncertain) and decision (refuse, retry_allowed, needs_review). Every recovery worker publishes every assessment; only the one whose recoverer_counting is 1 counts them, so sum() counts each once. A hand-over of the counting (the counting worker stopped or frozen) leaves a gap, never a double count.",
		}, []string{"outcome", "decision"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "takeovers_total",
			Help: "Sessions the recovery worker took over (lease expired or released with calls open: fence, load, assess).",
		}),
		crashToAsmt: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "crash_to_assessment_seconds",
			Help:    "For each call a takeover closed: seconds from the call's last event (its writer's last sign of life) to its assessment. Includes the lease TTL.",
			Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800},
		}),
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "plan_requests_total",
			Help: "Retry plans this recovery worker was asked for (jw.api.prepare), by result: issued, or the refusal's code (needs_review, completed, superseded_call, ...). Each request is answered by one recovery worker, so sum() counts each once.",
		}, []string{"result"}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "reviews_judged_total",
			Help: "Reviews of JW_REVIEWS the recovery workers judged, by verdict and result (accepted, or the rejection's code: invalid_review, review_conflict, ...). Every recovery worker judges every review; only the one whose recoverer_counting is 1 counts them, so sum() counts each once (a hand-over leaves a gap, never a double count).",
		}, []string{"verdict", "result"}),
		approvalsTO: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "approvals_timed_out_total",
			Help: "Calls that waited for approval and ended rejected at stage approval at or after their deadline, as the recovery workers' classifiers read them. Every recovery worker reads every log; only the one whose recoverer_counting is 1 counts them, so sum() counts each once (a hand-over leaves a gap, never a double count).",
		}),
		waiting:        map[string]time.Time{},
		seen:           map[string]struct{}{},
		now:            time.Now,
		awaitingDesc:   d("calls_awaiting_review", "Calls whose latest assessment is needs_review and for which no plan was issued since."),
		oldestDesc:     d("review_wait_oldest_seconds", "How long the oldest call awaiting review has waited, since this process first saw it needs_review (0 when none waits)."),
		openDesc:       d("open_calls", "Calls without a result yet, as the recovery worker's classifier tracks them."),
		openOldestDesc: d("open_call_oldest_seconds", "How long the oldest open call not waiting for approval has been open, from its tool.call's timestamp (the writer's clock), 0 when none is open. A call stays open while its body runs and until a takeover's fence closes it: one open much longer than its tool's timeout is stuck."),
		plansDesc:      d("plans", "Retry plans in jw_plans, by state (issued: waiting for a tool worker; consumed: used by an attempt).", "state"),
		seenDesc:       d("recoverer_events_seen_total", "Session events the recovery worker's classifier has read since the process started."),
		pendingDesc:    d("recoverer_consumer_pending_events", "Session events not yet delivered to the recovery worker's classifier (its consumer's lag)."),
		ackPendingDesc: d("recoverer_consumer_ack_pending_events", "Session events delivered to the classifier and not yet acknowledged."),
		upDesc:         d("recoverer_up", "1 when the last scrape read the recovery worker's state and consumer, 0 when it could not."),
		approvalsDesc:  d("approvals_pending", "Calls waiting for approval: approval.requested on the log, no approval.granted and no result yet (docs/protocol.md §17)."),
		replacedDesc:   d("stream_replaced", "1 for a protected stream that no longer matches the identity setup recorded (deleted and created again, or messages removed from its start): the recovery worker refuses to prepare plans and take sessions over until an operator confirms it (jingwei setup --confirm-replaced); 0 for the others.", "stream"),
		countingDesc:   d("recoverer_counting", "1 while this recovery worker counts the work every recovery worker does alike (assessments_total, reviews_judged_total, approvals_timed_out_total): it holds the counting lease and has caught up with the events and reviews that existed when it took it; 0 otherwise. At most one recovery worker of a deployment is at 1; sum() of those counters over all of them counts each once."),
		stoppedDesc:    d("tasks_stopped", "Stopped tasks (task.stopped on their session log, by a host or the budget); a stopped task never reopens, so this only grows while the logs are kept."),
	}
	for _, r := range []string{"issued", string(schema.CodeNeedsReview), string(schema.CodeCompleted)} {
		m.plans.WithLabelValues(r)
	}
	m.rev = newReviewMetrics()
	reg.MustRegister(append(m.rev.collectors(), m.assessments, m.takeovers, m.crashToAsmt, m.plans, m.reviews, m.approvalsTO, m)...)
	return m
}

var _ recoverer.OutcomeObserver = (*Recovery)(nil)

// PlanAnswered is recoverer.OutcomeObserver's.
func (m *Recovery) PlanAnswered(code schema.Code) {
	m.plans.WithLabelValues(resultLabel(code, "issued")).Inc()
}

// ReviewJudged is recoverer.OutcomeObserver's.
func (m *Recovery) ReviewJudged(verdict schema.Verdict, code schema.Code) {
	v := string(verdict)
	switch verdict {
	case schema.VerdictCompleted, schema.VerdictNotExecuted, schema.VerdictUncertain:
	default:
		v = "other"
	}
	// Made also while not counting: the series is there, at 0.
	c := m.reviews.WithLabelValues(v, resultLabel(code, "accepted"))
	if m.counting() {
		c.Inc()
	}
}

// ApprovalTimedOut is recoverer.OutcomeObserver's.
func (m *Recovery) ApprovalTimedOut(string, string) {
	if m.counting() {
		m.approvalsTO.Inc()
	}
}

// counting reports whether this process counts the work every recovery
// worker does alike (CountingSource).
func (m *Recovery) counting() bool {
	m.mu.Lock()
	src := m.src
	m.mu.Unlock()
	cs, ok := src.(CountingSource)
	return !ok || cs.Counting()
}

// resultLabel is ok for no code, else the code, bounded to the codes of
// the protocol (docs/protocol.md §15).
func resultLabel(code schema.Code, ok string) string {
	if code == "" {
		return ok
	}
	if len(code) > 40 || strings.ContainsFunc(string(code), func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z') }) {
		return "other"
	}
	return string(code)
}

// Source sets what the state gauges are read from (the recoverer, once
// built: it needs this Recovery as its Observer first).
func (m *Recovery) Source(src RecoverySource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.src = src
}

// Assessed is recoverer.Observer's: it counts the assessment and notes
// when a needs_review call started to wait.
func (m *Recovery) Assessed(a schema.Assessment) {
	// The same assessment is published more than once (the classifier
	// when it reads a fence, the takeover that wrote it; a redelivery):
	// count it once, as its Jw-Assessment-Id identifies it. Those seen
	// while not counting are remembered too: a repeat after this process
	// took the counting over is not counted again.
	id := a.Session + "/" + a.CallID + "/" + a.Evidence
	m.mu.Lock()
	if _, dup := m.seen[id]; dup {
		m.mu.Unlock()
		return
	}
	m.seen[id] = struct{}{}
	m.seenOrder = append(m.seenOrder, id)
	if len(m.seenOrder) > maxSeen {
		delete(m.seen, m.seenOrder[0])
		m.seenOrder = m.seenOrder[1:]
	}
	m.mu.Unlock()
	// Made also while not counting: the series is there, at 0.
	c := m.assessments.WithLabelValues(string(a.Outcome), string(a.Decision))
	if m.counting() {
		c.Inc()
	}
	if a.Decision == schema.DecisionNeedsReview {
		k := a.Session + "/" + a.CallID
		m.mu.Lock()
		if _, ok := m.waiting[k]; !ok && len(m.waiting) < maxOpen {
			m.waiting[k] = m.now()
		}
		m.mu.Unlock()
	}
}

// TookOver is recoverer.Observer's: it counts the takeover and, for each
// call it closed, the time from the call's last event to now.
func (m *Recovery) TookOver(_ string, h []schema.Event, assessed []schema.Assessment) {
	m.takeovers.Inc()
	if len(assessed) == 0 {
		return
	}
	last := map[string]time.Time{}
	for _, ev := range h {
		if id := ev.CallID(); id != "" && ev.At.After(last[id]) {
			last[id] = ev.At
		}
	}
	now := m.now()
	for _, a := range assessed {
		if at, ok := last[a.CallID]; ok && !at.IsZero() {
			m.crashToAsmt.Observe(max(now.Sub(at), 0).Seconds())
		}
	}
}

// Describe is prometheus.Collector's.
func (m *Recovery) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.awaitingDesc, m.oldestDesc, m.openDesc, m.openOldestDesc, m.plansDesc, m.seenDesc, m.pendingDesc, m.ackPendingDesc, m.upDesc, m.approvalsDesc, m.stoppedDesc, m.replacedDesc, m.countingDesc} {
		ch <- d
	}
}

// Collect is prometheus.Collector's: it reads the recoverer's status and
// its consumer's lag (bounded by ScrapeTimeout).
func (m *Recovery) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	src := m.src
	m.mu.Unlock()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	up := 1.0
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if st, err := src.Status(ctx, ""); err != nil {
		up = 0
	} else {
		gauge(m.awaitingDesc, float64(len(st.AwaitingReview)))
		gauge(m.oldestDesc, m.oldestWait(st.AwaitingReview).Seconds())
		gauge(m.openDesc, float64(st.Stats.OpenCalls))
		gauge(m.openOldestDesc, oldestOpen(st, m.now()).Seconds())
		gauge(m.approvalsDesc, float64(len(st.AwaitingApproval)))
		gauge(m.stoppedDesc, float64(len(st.StoppedTasks)))
		gauge(m.plansDesc, float64(st.Plans.Issued), "issued")
		gauge(m.plansDesc, float64(st.Plans.Consumed), "consumed")
		ch <- prometheus.MustNewConstMetric(m.seenDesc, prometheus.CounterValue, float64(st.Stats.EventsSeen))
	}
	if p, ap, err := src.ConsumerLag(ctx); err != nil {
		up = 0
	} else {
		gauge(m.pendingDesc, float64(p))
		gauge(m.ackPendingDesc, float64(ap))
	}
	if is, ok := src.(IdentitySource); ok {
		replaced := map[string]bool{}
		for _, p := range is.ReplacedStreams() {
			replaced[p.Stream] = true
		}
		names := is.ProtectedStreams()
		for name := range replaced {
			if !slices.Contains(names, name) {
				names = append(names, name) // the identity record itself
			}
		}
		for _, name := range names {
			v := 0.0
			if replaced[name] {
				v = 1
			}
			gauge(m.replacedDesc, v, name)
		}
	}
	c := 0.0
	if m.counting() {
		c = 1
	}
	gauge(m.countingDesc, c)
	gauge(m.upDesc, up)
}

// oldestOpen returns how long the oldest open call of st that does not
// wait for approval has been open at now (0 when none; never negative,
// whatever the writers' clocks say).
func oldestOpen(st service.Status, now time.Time) time.Duration {
	waiting := make(map[[2]string]bool, len(st.AwaitingApproval))
	for _, w := range st.AwaitingApproval {
		waiting[[2]string{w.Session, w.CallID}] = true
	}
	var oldest time.Duration
	for _, c := range st.OpenCalls {
		if c.At.IsZero() || waiting[[2]string{c.Session, c.CallID}] {
			continue
		}
		oldest = max(oldest, now.Sub(c.At))
	}
	return oldest
}

// oldestWait returns how long the longest-waiting call of awaiting has
// waited, and forgets the calls that no longer wait.
func (m *Recovery) oldestWait(awaiting []schema.Assessment) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	keep := make(map[string]time.Time, len(awaiting))
	var oldest time.Duration
	for _, a := range awaiting {
		k := a.Session + "/" + a.CallID
		since, ok := m.waiting[k]
		if !ok {
			since = now
		}
		keep[k] = since
		oldest = max(oldest, now.Sub(since))
	}
	// A call assessed needs_review just after the status was read is not
	// in it yet: keep the recent ones.
	for k, since := range m.waiting {
		if _, ok := keep[k]; !ok && now.Sub(since) < time.Minute {
			keep[k] = since
		}
	}
	m.waiting = keep
	return oldest
}
