package chaos

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// What the harness reads back from a deployment: every message of the
// jingwei streams and of the example tools' business records, as stored,
// with the server's timestamp. The invariants are computed from a snapshot
// and the harness's own facts (what it published, killed and asked), and
// from nothing else: no package internals, no process's memory.

// logEvent is one message of a session log (JW_EVENTS).
type logEvent struct {
	Seq   uint64
	Time  time.Time
	Owner string // the Jw-Owner header
	Event schema.Event
}

// assessmentMsg is one message of JW_ASSESSMENTS.
type assessmentMsg struct {
	Seq        uint64
	Time       time.Time
	ID         string // the Jw-Assessment-Id header
	Assessment schema.Assessment
}

// reviewMsg is one message of JW_REVIEWS.
type reviewMsg struct {
	Seq    uint64
	Time   time.Time
	Review schema.Review
}

// planMsg is one message of JW_PLANS.
type planMsg struct {
	Seq  uint64
	Time time.Time
	Plan schema.Plan
}

// answerMsg is one message of JW_ANSWERS.
type answerMsg struct {
	Seq    uint64
	Time   time.Time
	Answer schema.Answer
}

// orderRecord is one order of the orders bucket (orders.create's business
// record; only the fields the invariants use).
type orderRecord struct {
	OrderID  string `json:"order_id"`
	Task     string `json:"task"`
	Key      string `json:"key"`
	Customer string `json:"customer"`
}

// chargeRecord is one ledger entry of payments.charge (TOOLS_LEDGER).
type chargeRecord struct {
	Seq         uint64    `json:"-"`
	Time        time.Time `json:"-"`
	Session     string    `json:"session"`
	CallID      string    `json:"call_id"`
	Account     string    `json:"account"`
	AmountCents int64     `json:"amount_cents"`
	// Epoch is the charging writer's fencing epoch (header Jw-Fence-Epoch),
	// and Fence the highest epoch of the same session that wrote the
	// charge's ledger subject before it (a charge or a raised fence): a
	// charge below it got past the fence (package worker/fence).
	Epoch uint64 `json:"-"`
	Fence uint64 `json:"-"`
}

// snapshot is everything read back at one moment.
type snapshot struct {
	At          time.Time
	Events      []logEvent
	Assessments []assessmentMsg
	Reviews     []reviewMsg
	Plans       []planMsg
	Answers     []answerMsg
	Orders      []orderRecord
	Charges     []chargeRecord
	// PendingRequests is the number of requests left in the work queue.
	PendingRequests uint64
	// Undecodable counts messages that did not decode (by stream): a
	// finding of its own.
	Undecodable map[string]int
}

// callKey names a call across sessions.
type callKey struct{ Session, CallID string }

// callInfo is what a snapshot says about one call (one attempt).
type callInfo struct {
	Key       callKey
	Call      *schema.Call
	Seq       uint64
	Time      time.Time
	Owner     string
	Epoch     uint64
	Started   bool
	Result    *schema.Result
	ResultSeq uint64
	// Successor is the call id of the retry that follows it ("" for the
	// latest attempt of its chain).
	Successor string
	// FencedAt is the first session.fenced after the call with a higher
	// epoch (nil: none): from it on the call can gain no result.
	FencedAt *logEvent
}

// Open reports a call without a result.
func (c *callInfo) Open() bool { return c.Result == nil }

// Final reports a call whose outcome can no longer change: it has a
// result, or a fence of a newer writer follows it.
func (c *callInfo) Final() bool { return c.Result != nil || c.FencedAt != nil }

// index is a snapshot arranged for the invariants.
type index struct {
	snap  *snapshot
	calls map[callKey]*callInfo
	order []callKey // in log order per session, sessions sorted
	// byRequest holds the first attempts (no retry link) of each request
	// id, by session.
	byRequest map[[2]string][]callKey
	byPlan    map[string][]callKey // retry attempts by plan id
	assessed  map[callKey][]assessmentMsg
	reviews   map[callKey][]reviewMsg
	plans     map[callKey][]planMsg // plans by prior call
	answers   map[[2]string]bool    // session, request id
	charges   map[callKey][]chargeRecord
}

func newIndex(s *snapshot) *index {
	x := &index{
		snap: s, calls: map[callKey]*callInfo{}, byRequest: map[[2]string][]callKey{},
		byPlan: map[string][]callKey{}, assessed: map[callKey][]assessmentMsg{},
		reviews: map[callKey][]reviewMsg{}, plans: map[callKey][]planMsg{},
		answers: map[[2]string]bool{}, charges: map[callKey][]chargeRecord{},
	}
	evs := append([]logEvent(nil), s.Events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
	open := map[string][]*callInfo{} // session → calls not yet fenced off
	for i := range evs {
		ev := &evs[i]
		session := ev.Event.Session
		switch {
		case ev.Event.Call != nil:
			c := ev.Event.Call
			k := callKey{session, c.CallID}
			if _, dup := x.calls[k]; dup {
				continue // a duplicate call id: corrupt, counted by nothing here
			}
			// A call in the combined form (call.started) is started with its tool.call.
			ci := &callInfo{Key: k, Call: c, Seq: ev.Seq, Time: ev.Time, Owner: ev.Owner, Epoch: ev.Event.Epoch, Started: c.Started}
			x.calls[k] = ci
			x.order = append(x.order, k)
			open[session] = append(open[session], ci)
			if op := c.Operation; op != nil && op.Retry != nil {
				x.byPlan[op.Retry.PlanID] = append(x.byPlan[op.Retry.PlanID], k)
				if prior := x.calls[callKey{session, op.Retry.PriorCallID}]; prior != nil && prior.Successor == "" {
					prior.Successor = c.CallID
				}
			} else if c.RequestID != "" {
				rk := [2]string{session, c.RequestID}
				x.byRequest[rk] = append(x.byRequest[rk], k)
			}
		case ev.Event.Started != nil:
			if ci := x.calls[callKey{session, ev.Event.Started.CallID}]; ci != nil {
				ci.Started = true
			}
		case ev.Event.Result != nil:
			if ci := x.calls[callKey{session, ev.Event.Result.CallID}]; ci != nil && ci.Result == nil {
				ci.Result, ci.ResultSeq = ev.Event.Result, ev.Seq
			}
		case ev.Event.Fence != nil:
			keep := open[session][:0]
			for _, ci := range open[session] {
				if ev.Event.Fence.Epoch > ci.Epoch {
					ci.FencedAt = ev
					continue
				}
				keep = append(keep, ci)
			}
			open[session] = keep
		}
	}
	for _, a := range s.Assessments {
		k := callKey{a.Assessment.Session, a.Assessment.CallID}
		x.assessed[k] = append(x.assessed[k], a)
	}
	for _, r := range s.Reviews {
		k := callKey{r.Review.Session, r.Review.CallID}
		x.reviews[k] = append(x.reviews[k], r)
	}
	for _, p := range s.Plans {
		k := callKey{p.Plan.Session, p.Plan.PriorCallID}
		x.plans[k] = append(x.plans[k], p)
	}
	for _, a := range s.Answers {
		x.answers[[2]string{a.Answer.Session, a.Answer.RequestID}] = true
	}
	for _, c := range s.Charges {
		k := callKey{c.Session, c.CallID}
		x.charges[k] = append(x.charges[k], c)
	}
	return x
}

// chain returns every attempt of the logical action a request became: its
// first attempts and, transitively, their retries.
func (x *index) chain(session, requestID string) []*callInfo {
	var out []*callInfo
	for _, k := range x.byRequest[[2]string{session, requestID}] {
		for ci := x.calls[k]; ci != nil; {
			out = append(out, ci)
			if ci.Successor == "" {
				break
			}
			ci = x.calls[callKey{session, ci.Successor}]
		}
	}
	return out
}

// heads returns the latest attempt of each chain of a request.
func (x *index) heads(session, requestID string) []*callInfo {
	var out []*callInfo
	for _, ci := range x.chain(session, requestID) {
		if ci.Successor == "" {
			out = append(out, ci)
		}
	}
	return out
}

// firstAssessment returns the earliest stored assessment of a call.
func (x *index) firstAssessment(k callKey) (time.Time, bool) {
	var first time.Time
	for _, a := range x.assessed[k] {
		if first.IsZero() || a.Time.Before(first) {
			first = a.Time
		}
	}
	return first, !first.IsZero()
}

// expected is what the protocol's decision table (§9) says of a call,
// given what the log holds about it: the oracle the assessments are held
// to. It is written here from the protocol, not taken from the recovery
// package, so that a bug there cannot hide.
func expected(ci *callInfo) (schema.Outcome, string, schema.Decision) {
	var eff effect.Effect
	if ci.Call.Operation != nil {
		eff = ci.Call.Operation.Contract.Effect
	}
	uncertain := func(evidence string) (schema.Outcome, string, schema.Decision) {
		if eff == effect.ReadOnly || eff == effect.Idempotent {
			return schema.OutcomeUncertain, evidence, schema.DecisionRetryAllowed
		}
		return schema.OutcomeUncertain, evidence, schema.DecisionNeedsReview
	}
	switch r := ci.Result; {
	// Only a marker call without a start is not_started: a call in the
	// combined form (call.started, no marker) was started with its
	// tool.call, so without a result it is uncertain.
	case r == nil && ci.Call.StartMarker && !ci.Started && !ci.Call.Started:
		return schema.OutcomeNotStarted, "not_started_marker", schema.DecisionRetryAllowed
	case r == nil:
		return uncertain("no_result")
	case r.Status == schema.StatusOK:
		return schema.OutcomeCompleted, "ok", schema.DecisionRefuse
	case r.Status == schema.StatusRejected:
		return schema.OutcomeNotStarted, "rejected:" + string(r.Stage), schema.DecisionRetryAllowed
	}
	return uncertain(string(ci.Result.Status))
}

// decodeJSON decodes b into v, loosely (business records may carry more
// fields in a later version of the tools).
func decodeJSON(b []byte, v any) bool { return json.Unmarshal(b, v) == nil }
