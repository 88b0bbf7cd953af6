package chaos

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jingwei/jingwei/bench"
	"github.com/jingwei/jingwei/schema"
)

// action is one logical action of the workload: one agent intent, one
// request id, published once (or twice, with the same request id). Its
// marker is in its arguments (the order's customer, the charge's account),
// so every business record says which action it belongs to.
type action struct {
	ID        string
	Marker    string
	Session   string
	Task      string
	Tool      string
	RequestID string
	// Acked is set once a publish of the request got a PubAck.
	Acked bool
	// Republished counts the publishes after the first.
	Republished int
}

// kill is a SIGKILL of a tool-worker incarnation.
type kill struct {
	Owner string
	At    time.Time
}

// checkpoint is what the harness saw once the faults had stopped and the
// system settled, before the host and reviewer phase: the snapshot, and
// the calls jw.api.status listed as awaiting review.
type checkpoint struct {
	Snap     *snapshot
	Awaiting map[callKey]bool
	// Err is why jw.api.status could not be asked ("" if it was).
	Err string
}

// facts are what the harness itself knows of the run: what it published,
// whom it killed, what it saw at the checkpoint, what the host was told.
type facts struct {
	Actions []action
	Kills   []kill
	// Bound is the crash → first assessment target (lease TTL + 1 s, or +
	// 5 s on a cluster).
	Bound      time.Duration
	BoundText  string
	Checkpoint *checkpoint
	// HostNotes holds, per action id, the last answer the host got for it
	// (a prepare's error code), for the stuck actions' examples.
	HostNotes map[string]string
	// ConcurrentMismatch counts the groups of concurrent prepares of one
	// call that were not all answered with the same plan.
	ConcurrentMismatch []string
	// Start is when the run's fault clock started (Fault.At is relative
	// to it); the zero time writes the latency examples' kill times as
	// they are.
	Start time.Time
	// LeaseTTL is the run's lease TTL: a sample's lease expires at its
	// kill + LeaseTTL.
	LeaseTTL time.Duration
	// Split, on a cluster, splits the latency samples by Windows and
	// Outages (Latency.Split) and checks SplitBound on the node-down ones.
	Split bool
	// Windows are the spans in which a JetStream leader the takeover needs
	// was missing; Outages, by node, the spans a node was down or cut off.
	Windows []leaderWindow
	Outages map[int][]interval
	// SplitBound is the bound of the samples taken with a node down and
	// every leader there (lease TTL + 5 s).
	SplitBound     time.Duration
	SplitBoundText string
	// RecovererKills are when the recovery worker was SIGKILLed: a
	// sample whose span holds one waited for its restart.
	RecovererKills []time.Time
}

// The rows, in their order in the report.
const (
	rowDuplicateOrders  = "duplicate orders"
	rowDoubleCharges    = "double charges"
	rowPlansTwice       = "plans used twice"
	rowRepublishedTwice = "re-published requests run twice"
	rowAckedLost        = "acknowledged requests lost"
	rowOpenUnassessed   = "calls left open and unassessed"
	rowClosedUnassessed = "closed calls never assessed"
	rowRepeated         = "assessments repeated"
	rowWrong            = "wrong assessments"
	rowReviewMissing    = "needs_review missing from status"
	rowStuck            = "stuck actions"
	rowUntruthful       = "reviews contradicting the ledger"
	rowLateEffects      = "side effects after their call was fenced"
	rowBelowFence       = "charges that got past the ledger's fence"
	rowConcurrent       = "concurrent prepares not answered with the plan"
	rowLatency          = "crash -> first assessment"
	rowLatencyNodeDown  = "crash -> first assessment p99, node down (leaders up)"
	rowLatencyBeyond    = "crash -> first assessment p99 beyond leaderless time"
)

// check computes every row from the final snapshot and the facts, and the
// latency figures.
func check(f *facts, s *snapshot) ([]Row, Latency) {
	x := newIndex(s)
	rows := []Row{
		duplicateOrders(f, x),
		doubleCharges(f, x),
		plansUsedTwice(x),
		republishedRunTwice(x),
		ackedLost(f, x),
		openUnassessed(x),
		closedUnassessed(x),
		assessmentsRepeated(x),
		wrongAssessments(x),
		reviewMissing(f),
		stuckActions(f, x),
		untruthfulReviews(x),
		belowFence(x),
		lateEffects(x),
		infoRow(rowConcurrent, len(f.ConcurrentMismatch), f.ConcurrentMismatch, "groups of 3 concurrent prepares of one call that did not all get the same plan (superseded_call allowed once the plan ran)"),
	}
	lat, latRows := latency(f, x)
	return append(rows, latRows...), lat
}

func ref(k callKey) string { return k.Session + "/" + k.CallID }

// duplicateOrders: order records beyond the first of one logical action
// (found by the action's marker, the order's customer) or of one task +
// key.
func duplicateOrders(f *facts, x *index) Row {
	byMarker := map[string]int{}
	byKey := map[[2]string]int{}
	for _, o := range x.snap.Orders {
		byMarker[o.Customer]++
		byKey[[2]string{o.Task, o.Key}]++
	}
	extra := 0
	var ex []string
	for _, a := range f.Actions {
		if n := byMarker[a.Marker]; n > 1 {
			extra += n - 1
			ex = append(ex, fmt.Sprintf("%s (%d orders)", a.RequestID, n))
		}
	}
	for k, n := range byKey {
		if n > 1 && k[1] != "" {
			ex = append(ex, fmt.Sprintf("task %s key %s (%d orders)", k[0], k[1], n))
			extra += n - 1 // only reachable if one key served two markers
		}
	}
	sort.Strings(ex)
	return zeroRow(rowDuplicateOrders, extra, ex, "order records beyond one per logical action (and per task + key)")
}

// excusedPayment reports whether a payment's second charge is a reviewer's
// mistake rather than jingwei's: a not_executed review of one of its calls
// signed while the ledger already held a charge of that call. The harness's
// reviewer reads the ledger before signing, so this never happens unless
// the ledger read was stale; untruthfulReviews counts it.
func excusedPayment(x *index, chain []*callInfo) bool {
	for _, ci := range chain {
		for _, r := range x.reviews[ci.Key] {
			if r.Review.Verdict != schema.VerdictNotExecuted {
				continue
			}
			for _, c := range x.charges[ci.Key] {
				if c.Time.Before(r.Time) {
					return true
				}
			}
		}
	}
	return false
}

// doubleCharges: ledger entries beyond the first of one logical payment
// (one request id, its account marker), unless a not_executed review was
// signed against the ledger (excusedPayment). A truthful not_executed
// review does not excuse it: when the old attempt's charge lands after the
// review (a frozen worker woken up), the payment is charged twice.
func doubleCharges(f *facts, x *index) Row {
	byMarker := map[string]int{}
	for _, c := range x.snap.Charges {
		byMarker[c.Account]++
	}
	extra := 0
	var ex []string
	for _, a := range f.Actions {
		n := byMarker[a.Marker]
		if n <= 1 || excusedPayment(x, x.chain(a.Session, a.RequestID)) {
			continue
		}
		extra += n - 1
		ex = append(ex, fmt.Sprintf("%s/%s (%d charges)", a.Session, a.RequestID, n))
	}
	return zeroRow(rowDoubleCharges, extra, ex, "ledger entries beyond one per logical payment, not excused by a review that contradicted the ledger")
}

// plansUsedTwice: plan ids with more than one recorded attempt.
func plansUsedTwice(x *index) Row {
	var ex []string
	for id, ks := range x.byPlan {
		if len(ks) > 1 {
			ex = append(ex, fmt.Sprintf("%s (%d attempts)", id, len(ks)))
		}
	}
	sort.Strings(ex)
	return zeroRow(rowPlansTwice, len(ex), ex, "plan ids with two recorded attempts (tool.call events carrying the plan)")
}

// republishedRunTwice: request ids with more than one first attempt
// (tool.call without a retry link) in their session's log.
func republishedRunTwice(x *index) Row {
	var ex []string
	for k, ks := range x.byRequest {
		if len(ks) > 1 {
			ex = append(ex, fmt.Sprintf("%s/%s (%d calls)", k[0], k[1], len(ks)))
		}
	}
	sort.Strings(ex)
	return zeroRow(rowRepublishedTwice, len(ex), ex, "request ids with two tool.call events")
}

// ackedLost: requests acknowledged by JetStream with neither a tool.call
// nor an answer.
func ackedLost(f *facts, x *index) Row {
	var ex []string
	for _, a := range f.Actions {
		rk := [2]string{a.Session, a.RequestID}
		if a.Acked && len(x.byRequest[rk]) == 0 && !x.answers[rk] {
			ex = append(ex, a.Session+"/"+a.RequestID)
		}
	}
	return zeroRow(rowAckedLost, len(ex), ex, "requests with a PubAck and neither a tool.call nor an answer on jw.answers")
}

// openUnassessed: calls without a result and without any assessment.
func openUnassessed(x *index) Row {
	var ex []string
	for _, k := range x.order {
		if ci := x.calls[k]; ci.Open() && len(x.assessed[k]) == 0 {
			how := "never fenced"
			if f := ci.FencedAt; f != nil {
				how = fmt.Sprintf("fenced at epoch %d by %s", f.Event.Fence.Epoch, f.Event.Fence.Owner)
			}
			ex = append(ex, fmt.Sprintf("%s (written by %s; %s)", ref(k), ci.Owner, how))
		}
	}
	return zeroRow(rowOpenUnassessed, len(ex), ex, "tool.call with no tool.result and no assessment")
}

// closedUnassessed: calls with a result and no assessment.
func closedUnassessed(x *index) Row {
	var ex []string
	for _, k := range x.order {
		if ci := x.calls[k]; !ci.Open() && len(x.assessed[k]) == 0 {
			ex = append(ex, ref(k))
		}
	}
	return zeroRow(rowClosedUnassessed, len(ex), ex, "tool.call with a tool.result and no assessment")
}

// assessmentsRepeated: assessment messages beyond the first of one
// Jw-Assessment-Id (one call outcome). Reported, not a must: a repeated
// assessment is harmless (readers key on the id), only wasteful.
func assessmentsRepeated(x *index) Row {
	byID := map[string]int{}
	for _, a := range x.snap.Assessments {
		id := a.ID
		if id == "" {
			id = a.Assessment.ID()
		}
		byID[id]++
	}
	extra := 0
	var ex []string
	for id, n := range byID {
		if n > 1 {
			extra += n - 1
			ex = append(ex, fmt.Sprintf("%s (%d)", id, n))
		}
	}
	sort.Strings(ex)
	return infoRow(rowRepeated, extra, ex, "assessment messages beyond one per Jw-Assessment-Id (harmless: readers key on the id)")
}

// wrongAssessments: assessments whose outcome, evidence or decision
// contradicts what the final log says of the call (expected), and
// assessments of calls the log does not hold.
func wrongAssessments(x *index) Row {
	var ex []string
	for _, a := range x.snap.Assessments {
		k := callKey{a.Assessment.Session, a.Assessment.CallID}
		ci := x.calls[k]
		if ci == nil {
			ex = append(ex, fmt.Sprintf("%s: assessed, not on the log", ref(k)))
			continue
		}
		o, e, d := expected(ci)
		if a.Assessment.Outcome != o || a.Assessment.Evidence != e || a.Assessment.Decision != d {
			ex = append(ex, fmt.Sprintf("%s: %s/%s/%s, the log says %s/%s/%s", ref(k), a.Assessment.Outcome, a.Assessment.Evidence, a.Assessment.Decision, o, e, d))
		}
	}
	return zeroRow(rowWrong, len(ex), ex, "assessments contradicting the call's final history (outcome, evidence or decision)")
}

// awaitingReview returns the calls of a snapshot that should be listed as
// awaiting review: the latest attempt of its chain, final, needs_review by
// the decision table, with no plan issued for it and no review of it.
func awaitingReview(x *index) []callKey {
	var out []callKey
	for _, k := range x.order {
		ci := x.calls[k]
		if ci.Successor != "" || !ci.Final() || len(x.plans[k]) > 0 || len(x.reviews[k]) > 0 {
			continue
		}
		if _, _, d := expected(ci); d == schema.DecisionNeedsReview {
			out = append(out, k)
		}
	}
	return out
}

// reviewMissing: at the checkpoint, calls awaiting review that
// jw.api.status did not list.
func reviewMissing(f *facts) Row {
	cp := f.Checkpoint
	if cp == nil || cp.Err != "" {
		note := "not checked"
		if cp != nil {
			note = "jw.api.status: " + cp.Err
		}
		return Row{Name: rowReviewMissing, Value: math.NaN(), Target: "= 0", Must: true, Note: note}
	}
	var ex []string
	cx := newIndex(cp.Snap)
	want := awaitingReview(cx)
	assessed := 0 // of the missing, those the recovery worker had assessed needs_review
	for _, k := range want {
		if !cp.Awaiting[k] {
			ex = append(ex, ref(k))
			if latestDecision(cx, k) == schema.DecisionNeedsReview {
				assessed++
			}
		}
	}
	return zeroRow(rowReviewMissing, len(ex), ex, fmt.Sprintf("needs_review calls (latest attempt, final, no plan, no review) missing from jw.api.status after the faults: %d of %d; %d of the missing had a needs_review assessment on jw.assessments", len(ex), len(want), assessed))
}

// stuckActions: logical actions that got a call but no attempt ended ok,
// no trusted review said completed and no answer refused them, after the
// host and reviewer phase had every chance to move them on.
func stuckActions(f *facts, x *index) Row {
	var ex []string
	for _, a := range f.Actions {
		chain := x.chain(a.Session, a.RequestID)
		if len(chain) == 0 || x.answers[[2]string{a.Session, a.RequestID}] {
			continue // lost (counted there) or answered
		}
		done := false
		for _, ci := range chain {
			if ci.Result != nil && ci.Result.Status == schema.StatusOK {
				done = true
			}
			for _, r := range x.reviews[ci.Key] {
				if r.Review.Verdict == schema.VerdictCompleted && ci.Successor == "" {
					done = true
				}
			}
		}
		if !done {
			note := f.HostNotes[a.ID]
			if note == "" {
				note = "never prepared"
			}
			ex = append(ex, fmt.Sprintf("%s/%s (%d attempts; %s)", a.Session, a.RequestID, len(chain), note))
		}
	}
	return zeroRow(rowStuck, len(ex), ex, "actions with no ok attempt, no completed review and no answer after the host phase")
}

// untruthfulReviews: not_executed reviews signed while the ledger held a
// charge of the reviewed call. The harness's reviewer reads the ledger
// first: a non-zero value means that read was stale.
func untruthfulReviews(x *index) Row {
	var ex []string
	for k, rs := range x.reviews {
		for _, r := range rs {
			if r.Review.Verdict != schema.VerdictNotExecuted {
				continue
			}
			for _, c := range x.charges[k] {
				if c.Time.Before(r.Time) {
					ex = append(ex, ref(k))
				}
			}
		}
	}
	sort.Strings(ex)
	return zeroRow(rowUntruthful, len(ex), ex, "not_executed reviews signed while the ledger held the call's charge (a stale ledger read)")
}

// belowFence: ledger charges written by a writer whose fencing epoch is
// below one that the same session had already written on the charge's
// ledger subject (a newer writer's charge, a reviewer's raised fence): the
// fence of package worker/fence must refuse every one of them.
func belowFence(x *index) Row {
	var ex []string
	for _, c := range x.snap.Charges {
		if c.Epoch < c.Fence {
			ex = append(ex, fmt.Sprintf("%s/%s (epoch %d below the fence %d)", c.Session, c.CallID, c.Epoch, c.Fence))
		}
	}
	return zeroRow(rowBelowFence, len(ex), ex, "ledger charges of a writer below the session's fence already on that ledger subject (the fencing token not enforced)")
}

// lateEffects: ledger charges stored after a newer writer fenced their
// call's session: a zombie's side effect. Reported: whether it becomes a
// double charge is the double-charge row's.
func lateEffects(x *index) Row {
	var ex []string
	for _, c := range x.snap.Charges {
		ci := x.calls[callKey{c.Session, c.CallID}]
		if ci != nil && ci.FencedAt != nil && c.Time.After(ci.FencedAt.Time) {
			ex = append(ex, fmt.Sprintf("%s (%.1fs after the fence)", ref(ci.Key), c.Time.Sub(ci.FencedAt.Time).Seconds()))
		}
	}
	return infoRow(rowLateEffects, len(ex), ex, "ledger charges stored after their call's session was fenced by a newer writer")
}

// leftOpen returns the calls a killed tool-worker incarnation left open
// (tool.call appended by it, no result), each with its kill.
func leftOpen(f *facts, x *index) map[callKey]kill {
	byOwner := map[string]kill{}
	for _, k := range f.Kills {
		byOwner[k.Owner] = k
	}
	out := map[callKey]kill{}
	for _, k := range x.order {
		ci := x.calls[k]
		if kl, ok := byOwner[ci.Owner]; ok && ci.Open() {
			out[k] = kl
		}
	}
	return out
}

// latency: for every call a killed tool worker left open and that was not
// assessed before the kill, the time from the kill to its first stored
// assessment. The p99 row carries the bound; unassessed calls are the
// unassessed row's.
//
// On a cluster the samples are split by what the cluster was doing
// between the lease's expiry (the kill + the lease TTL) and the first
// assessment: leaderless, when a JetStream leader the takeover needs was
// missing for part of that span (facts.Windows: the meta leader, the lease
// bucket's or a log stream's leader — no fence or assessment can be
// written then, whatever jingwei does, until nats-server has elected a new
// one); node down, when a node was down or cut off during it but every
// leader was there; healthy otherwise. The bound of a cluster (TTL + 5 s)
// is checked on the node-down samples (facts.SplitBound); every group is
// printed. The rest are split once more: the samples that waited for a
// recovery worker's restart (a kill of it between the tool worker's kill
// and the first assessment), and the healthy ones.
func latency(f *facts, x *index) (Latency, []Row) {
	t := tallyLatency(f, latencySamples(f, x))
	xs := t.xs
	slices.Sort(xs)
	bound := f.Bound.Seconds()
	l := Latency{Samples: len(xs), Bound: Seconds(bound), P50: Seconds(math.NaN()), P90: Seconds(math.NaN()), P99: Seconds(math.NaN()), Max: Seconds(math.NaN())}
	if len(xs) > 0 {
		l.P50, l.P90, l.P99 = Seconds(bench.Percentile(xs, 50)), Seconds(bench.Percentile(xs, 90)), Seconds(bench.Percentile(xs, 99))
		l.Max = Seconds(xs[len(xs)-1])
	}
	mk := func(name string, v Seconds) Row {
		r := Row{Name: rowLatency + " " + name, Value: float64(v), Unit: "s", Target: f.BoundText,
			Met: !math.IsNaN(float64(v)) && float64(v) <= bound}
		if len(xs) == 0 {
			r.Note = "no call was left open by a kill"
		}
		if name == "max" {
			r.Examples = cap5(slowest(t.slow))
		}
		return r
	}
	l.ResultToAssessment = classifierLag(x)
	l.CrashToFence, l.FenceToAssessment = distribution(t.toFence), distribution(t.fenceToFirst)
	slices.SortStableFunc(t.list, func(a, b LatencySample) int { return cmp.Compare(b.Latency, a.Latency) })
	l.List = t.list
	rows := []Row{mk("p50", l.P50), mk("p90", l.P90), mk("p99", l.P99), mk("max", l.Max)}
	if !f.Split {
		return l, rows
	}
	return l, append(rows, splitLatency(f, &l, t)...)
}

// latencySample is one call left open by a kill, with what the cluster
// was doing between its lease's expiry and its first assessment.
type latencySample struct {
	k             callKey
	kl            kill
	v             float64
	expiry, first time.Time
	fence         *time.Time
	leaderless    time.Duration // overlap with the windows
	windows       []string
	back          time.Time // when the last window it overlapped closed
	nodeDown      bool
	recovererDown bool
	split         string
}

// roundMS is d in seconds, rounded to the millisecond.
func roundMS(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// latencySamples returns a sample for every call a kill left open that
// was assessed after the kill.
func latencySamples(f *facts, x *index) []latencySample {
	var samples []latencySample
	for k, kl := range leftOpen(f, x) {
		first, ok := x.firstAssessment(k)
		if !ok || first.Before(kl.At) {
			continue
		}
		s := latencySample{k: k, kl: kl, v: roundMS(first.Sub(kl.At)), expiry: kl.At.Add(f.LeaseTTL), first: first, split: "no fence before it"}
		if fe := x.calls[k].FencedAt; fe != nil && !fe.Time.After(first) {
			t := fe.Time
			s.fence = &t
			by := fe.Owner
			if fe.Event.Fence != nil && fe.Event.Fence.Owner != "" {
				by = fe.Event.Fence.Owner
			}
			s.split = fmt.Sprintf("fence +%.3fs by %s, assessment +%.3fs after it", roundMS(fe.Time.Sub(kl.At)), by, roundMS(first.Sub(fe.Time)))
		}
		s.placeInCluster(f)
		samples = append(samples, s)
	}
	return samples
}

// placeInCluster finds what the cluster was doing between the sample's
// lease expiry (or its assessment, if sooner) and its assessment:
// leaderless windows, nodes down, a recovery worker restarted.
func (s *latencySample) placeInCluster(f *facts) {
	from := s.expiry
	if s.first.Before(from) {
		from = s.first
	}
	var clipped [][2]time.Time
	for _, w := range f.Windows {
		if !w.overlaps(from, s.first) {
			continue
		}
		lo, hi := w.From, w.To
		if lo.Before(from) {
			lo = from
		}
		if hi.After(s.first) {
			hi = s.first
		}
		clipped = append(clipped, [2]time.Time{lo, hi})
		s.windows = append(s.windows, fmt.Sprintf("%s %.1fs", w.Target, w.To.Sub(w.From).Seconds()))
		if w.To.After(s.back) {
			s.back = w.To
		}
	}
	s.leaderless = unionLength(clipped)
	for _, ivs := range f.Outages {
		for _, iv := range ivs {
			if iv.overlaps(from, s.first.Add(time.Millisecond)) {
				s.nodeDown = true
			}
		}
	}
	for _, rk := range f.RecovererKills {
		if !rk.Before(s.kl.At) && rk.Before(s.first) {
			s.recovererDown = true
		}
	}
	if s.recovererDown {
		s.split += "; the recovery worker restarted"
	}
	if len(s.windows) > 0 {
		s.split += fmt.Sprintf("; leaderless: %s", strings.Join(s.windows, ", "))
	} else if s.nodeDown {
		s.split += "; a node down, leaders up"
	}
}

// over is a sample over a bound, with its line for the examples.
type over struct {
	v    float64
	text string
}

// slowest returns the examples' lines, slowest first.
func slowest(os []over) []string {
	slices.SortFunc(os, func(a, b over) int { return cmp.Compare(b.v, a.v) })
	var out []string
	for _, o := range os {
		out = append(out, o.text)
	}
	return out
}

// latencyTally is the samples sorted into what the report prints.
type latencyTally struct {
	slow, downSlow        []over
	xs                    []float64
	toFence, fenceToFirst []float64
	list                  []LatencySample
	grp                   struct{ down, leaderless, recoverer, healthy, beyond, backToFence []float64 }
}

// tallyLatency sorts the samples into the report's list, its
// distributions and (on a cluster) its groups.
func tallyLatency(f *facts, samples []latencySample) latencyTally {
	var t latencyTally
	for _, s := range samples {
		t.list = append(t.list, s.listed(f))
		t.xs = append(t.xs, s.v)
		if s.fence != nil {
			t.toFence = append(t.toFence, math.Max(0, roundMS(s.fence.Sub(s.kl.At))))
			t.fenceToFirst = append(t.fenceToFirst, roundMS(s.first.Sub(*s.fence)))
		}
		text := func() string {
			at := fmt.Sprintf("%.3fs", roundMS(s.kl.At.Sub(f.Start)))
			if f.Start.IsZero() {
				at = s.kl.At.UTC().Format("15:04:05.000")
			}
			return fmt.Sprintf("%s %.3fs (%s killed at %s; %s)", ref(s.k), s.v, s.kl.Owner, at, s.split)
		}
		if s.v > f.Bound.Seconds() {
			t.slow = append(t.slow, over{s.v, text()})
		}
		switch {
		case len(s.windows) > 0:
			t.grp.leaderless = append(t.grp.leaderless, s.v)
			t.grp.beyond = append(t.grp.beyond, math.Max(0, roundMS(time.Duration(s.v*float64(time.Second))-s.leaderless)))
			if s.fence != nil && s.fence.After(s.back) {
				t.grp.backToFence = append(t.grp.backToFence, roundMS(s.fence.Sub(s.back)))
			}
		case s.nodeDown:
			t.grp.down = append(t.grp.down, s.v)
			if f.SplitBound > 0 && s.v > f.SplitBound.Seconds() {
				t.downSlow = append(t.downSlow, over{s.v, text()})
			}
		case s.recovererDown:
			t.grp.recoverer = append(t.grp.recoverer, s.v)
		default:
			t.grp.healthy = append(t.grp.healthy, s.v)
		}
	}
	return t
}

// listed is the sample as the report lists it.
func (s latencySample) listed(f *facts) LatencySample {
	ls := LatencySample{Call: ref(s.k), Owner: s.kl.Owner, Killed: Seconds(roundMS(s.kl.At.Sub(f.Start))), Latency: Seconds(s.v), Fence: Seconds(math.NaN())}
	if f.Start.IsZero() {
		ls.Killed = Seconds(math.NaN())
	}
	if s.fence != nil {
		ls.Fence = Seconds(roundMS(s.fence.Sub(s.kl.At)))
	}
	if f.Split {
		ls.Group, ls.Leaderless = "healthy", Seconds(roundMS(s.leaderless))
		switch {
		case len(s.windows) > 0:
			ls.Group = "leaderless"
		case s.nodeDown:
			ls.Group = "node_down"
		case s.recovererDown:
			ls.Group = "recoverer_restart"
		}
	}
	return ls
}

// splitLatency sets l.Split from the groups of a cluster run and returns
// its two rows: the node-down samples against the cluster's bound, and
// what the takeover added beyond the leaderless windows.
func splitLatency(f *facts, l *Latency, t latencyTally) []Row {
	l.Split = &LatencySplit{
		NodeDown: distribution(t.grp.down), Leaderless: distribution(t.grp.leaderless), Healthy: distribution(t.grp.healthy),
		RecovererRestart:        distribution(t.grp.recoverer),
		LeaderlessBeyondWindows: distribution(t.grp.beyond), LeadersBackToFence: distribution(t.grp.backToFence),
		Bound: Seconds(f.SplitBound.Seconds()),
	}
	d := l.Split.NodeDown
	r := Row{Name: rowLatencyNodeDown, Value: float64(d.P99), Unit: "s", Target: f.SplitBoundText,
		Met: d.Samples > 0 && float64(d.P99) <= f.SplitBound.Seconds(), Examples: cap5(slowest(t.downSlow)),
		Note: fmt.Sprintf("p99 of the %d samples whose lease expired while a node was down or cut off and every JetStream leader of the takeover was there", d.Samples)}
	if d.Samples == 0 {
		r.Note = "no sample: no lease expired while a node was down with every leader there"
	}
	b := l.Split.LeaderlessBeyondWindows
	rb := Row{Name: rowLatencyBeyond, Value: float64(b.P99), Unit: "s", Target: f.SplitBoundText,
		Met:  b.Samples == 0 || float64(b.P99) <= f.SplitBound.Seconds(),
		Note: fmt.Sprintf("p99, over the %d samples that met a leaderless window, of the latency minus the time without a leader: what the takeover added beyond the election", b.Samples)}
	return []Row{r, rb}
}

// classifierLag is the distribution of the time from each closed call's
// tool.result (stored) to its first stored assessment.
func classifierLag(x *index) Distribution {
	results := map[uint64]time.Time{}
	for _, ev := range x.snap.Events {
		if ev.Event.Result != nil {
			results[ev.Seq] = ev.Time
		}
	}
	var xs []float64
	for _, k := range x.order {
		ci := x.calls[k]
		if ci.Result == nil {
			continue
		}
		if first, ok := x.firstAssessment(k); ok {
			xs = append(xs, math.Max(0, math.Round(first.Sub(results[ci.ResultSeq]).Seconds()*1000)/1000))
		}
	}
	return distribution(xs)
}

// distribution sums up xs (seconds; sorted in place); NaN figures when
// xs is empty.
func distribution(xs []float64) Distribution {
	d := Distribution{Samples: len(xs), P50: Seconds(math.NaN()), P99: Seconds(math.NaN()), Max: Seconds(math.NaN())}
	if len(xs) > 0 {
		slices.Sort(xs)
		d.P50, d.P99, d.Max = Seconds(bench.Percentile(xs, 50)), Seconds(bench.Percentile(xs, 99)), Seconds(xs[len(xs)-1])
	}
	return d
}

// unionLength is the time covered by the intervals together: windows of
// several streams that overlap (every leader on a killed node is elected
// again at about the same time) count once, so a sample's time without a
// leader is never more than its latency.
func unionLength(ivs [][2]time.Time) time.Duration {
	sort.Slice(ivs, func(i, j int) bool { return ivs[i][0].Before(ivs[j][0]) })
	var total time.Duration
	var end time.Time
	for _, iv := range ivs {
		lo, hi := iv[0], iv[1]
		if lo.Before(end) {
			lo = end
		}
		if hi.After(lo) {
			total += hi.Sub(lo)
			end = hi
		}
	}
	return total
}
