package recoverer

import (
	"context"
	"sort"
	"sync"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// maxAwaiting bounds the calls awaiting review that a recoverer remembers
// for jw.api.status; the oldest are forgotten first (they stay needs_review
// in the log: prepare always decides from the history).
const maxAwaiting = 10_000

// awaiting is the set of calls whose latest assessment is needs_review, in
// the order they were assessed. Safe for concurrent use.
type awaiting struct {
	mu    sync.Mutex
	max   int
	n     uint64
	calls map[[2]string]awaitingCall
}

type awaitingCall struct {
	a schema.Assessment
	n uint64
}

func newAwaiting(max int) *awaiting {
	return &awaiting{max: max, calls: make(map[[2]string]awaitingCall)}
}

// note records an assessment: needs_review adds the call, anything else
// removes it.
func (w *awaiting) note(a schema.Assessment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{a.Session, a.CallID}
	if a.Decision != schema.DecisionNeedsReview {
		delete(w.calls, k)
		return
	}
	w.n++
	w.calls[k] = awaitingCall{a: a, n: w.n}
	if len(w.calls) > w.max {
		var oldest [2]string
		var on uint64
		for k, c := range w.calls {
			if on == 0 || c.n < on {
				oldest, on = k, c.n
			}
		}
		delete(w.calls, oldest)
	}
}

// forget removes a call (a plan was issued for it).
func (w *awaiting) forget(session, callID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.calls, [2]string{session, callID})
}

func (w *awaiting) list(session string) []schema.Assessment {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []awaitingCall
	for _, c := range w.calls {
		if session == "" || c.a.Session == session {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	as := make([]schema.Assessment, len(out))
	for i, c := range out {
		as[i] = c.a
	}
	return as
}

// Status is the answer of jw.api.status.
type Status struct {
	// Session is the session asked about, "" for all.
	Session string `json:"session,omitempty"`
	// OpenCalls are the calls without a result yet, as this recoverer's
	// classifier tracks them.
	OpenCalls []OpenCall `json:"open_calls"`
	// AwaitingReview are the calls whose latest assessment this recoverer
	// published is needs_review and for which no plan was issued since (at
	// most the 10,000 most recent).
	AwaitingReview []schema.Assessment `json:"awaiting_review"`
	// Plans counts the plans in jw_plans by state.
	Plans PlanCounts `json:"plans"`
	// Stats are the classifier's counters.
	Stats Stats `json:"stats"`
	// Reviews are the reviews of one call (only when the request named a
	// call), in stream order, each as prepare would judge it.
	Reviews []ReviewCheck `json:"reviews,omitempty"`
}

// PlanCounts counts plans by state.
type PlanCounts struct {
	Issued   int `json:"issued"`
	Consumed int `json:"consumed"`
	// IssuedIDs lists the plans still issued (for one session only).
	IssuedIDs []string `json:"issued_ids,omitempty"`
}

// Status reports open calls, calls awaiting review and plan counts, for
// one session or (session "") for all. It reads every plan in jw_plans.
func (r *Recoverer) Status(ctx context.Context, session string) (Status, error) {
	if session != "" {
		if err := stream.ValidateSession(session); err != nil {
			return Status{}, schema.Errorf(schema.CodeBadRequest, "%v", err)
		}
	}
	st := Status{Session: session, OpenCalls: r.track.list(session), AwaitingReview: r.review.list(session), Stats: r.Stats()}
	sort.Slice(st.OpenCalls, func(i, j int) bool {
		a, b := st.OpenCalls[i], st.OpenCalls[j]
		return a.Session < b.Session || a.Session == b.Session && a.Seq < b.Seq
	})
	if st.OpenCalls == nil {
		st.OpenCalls = []OpenCall{}
	}
	recs, err := r.planRecords(ctx)
	if err != nil {
		return Status{}, err
	}
	for _, rec := range recs {
		if session != "" && rec.Plan.Session != session {
			continue
		}
		switch rec.State {
		case stream.PlanIssued:
			st.Plans.Issued++
			if session != "" {
				st.Plans.IssuedIDs = append(st.Plans.IssuedIDs, rec.Plan.PlanID)
			}
		case stream.PlanConsumed:
			st.Plans.Consumed++
		}
	}
	return st, nil
}
