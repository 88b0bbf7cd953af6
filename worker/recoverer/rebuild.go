package recoverer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// rebuildAwaiting fills the awaiting-review set from durable state, so
// that jw.api.status says after a restart what it said before. Only the
// session logs and signed records decide; assessments carry no signature
// (anyone with the recoverer credential can publish one), so they only
// say which sessions to read and in what order their calls were assessed:
// every session with an assessment on JW_ASSESSMENTS is loaded, and each
// of its calls that the log itself classifies needs_review (closed: a
// result, or a fence of its writer; recovery.Inspect) awaits review, in
// the order of the latest assessment naming it (stream order, a batch's
// members in their order; calls no assessment names come after). Then
// every call a trusted completed review settled (JW_REVIEWS, folded as
// prepare folds them) and every call a plan was issued for (jw_plans:
// only records whose plan carries a trusted planner's signature, for the
// plan id of its own call) is removed. The live path (noted, settled)
// keeps the set up to date from then on. It reads every assessment and
// every assessed session's log once. With AutoPlan it also queues for the
// auto-planner every call the log classifies retry_allowed that has no
// plan in jw_plans.
func (r *Recoverer) rebuildAwaiting(ctx context.Context) error {
	order, sessions, err := r.assessmentOrder(ctx)
	if err != nil {
		return err
	}
	all, unreadable, err := r.classifyInOrder(ctx, sessions, order.at)
	if err != nil {
		return err
	}
	w := newAwaiting(r.awaiting.max)
	// With AutoPlan, the calls the log classifies retry_allowed and that
	// have no plan yet are queued again below: the auto-plan queue of an
	// earlier run lived in its memory only.
	var unplanned map[callKey]bool
	if r.cfg.AutoPlan {
		unplanned = map[callKey]bool{}
	}
	for _, f := range all {
		switch f.a.Decision {
		case schema.DecisionNeedsReview:
			w.note(f.a)
		case schema.DecisionRetryAllowed:
			if unplanned != nil {
				unplanned[callKey{f.a.Session, f.a.CallID}] = true
			}
		}
	}
	if err := r.forgetReviewed(ctx, w); err != nil {
		return err
	}
	untrusted, err := r.forgetPlanned(ctx, w, unplanned)
	if err != nil {
		return err
	}
	r.awaiting.replace(w)
	for k := range unplanned {
		r.issuer.queue(k.session, k.callID)
	}
	r.log.Info().Int("assessments", order.assessed).Int("undecodable", order.skipped).Int("sessions", len(sessions)).Int("unreadable_sessions", unreadable).
		Int("unsigned_plan_records", untrusted).Int("awaiting_review", len(w.calls)).
		Msg("awaiting review rebuilt from the session logs, JW_REVIEWS and the signed plans of jw_plans")
	return nil
}

// place is where the latest assessment naming a call stands: its stream
// sequence and its place in its batch.
type place struct{ seq, member uint64 }

// assessedOrder is what JW_ASSESSMENTS holds: the place of each call's
// latest assessment, and how many assessments were read or skipped.
type assessedOrder struct {
	at                map[callKey]place
	assessed, skipped int
}

// assessmentOrder reads JW_ASSESSMENTS once, every session's subject in
// turn, for the order in which the calls were assessed; it returns the
// sessions it names, sorted.
func (r *Recoverer) assessmentOrder(ctx context.Context) (assessedOrder, []string, error) {
	o := assessedOrder{at: map[callKey]place{}}
	streamName := r.t.Names().StreamName("ASSESSMENTS")
	st, err := r.t.JS.Stream(ctx, streamName)
	if err != nil {
		return o, nil, fmt.Errorf("recoverer: rebuild awaiting review: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(r.t.Names().AssessmentsSubject("*")))
	if err != nil {
		return o, nil, fmt.Errorf("recoverer: rebuild awaiting review: list sessions: %w", err)
	}
	var sessions []string
	for subj := range info.State.Subjects {
		session := stream.SessionOf(subj)
		sessions = append(sessions, session)
		err := r.t.Reader().ReadSubject(ctx, streamName, subj, func(m *jetstream.RawStreamMsg) error {
			as, err := schema.DecodeAssessments(m.Data)
			if err != nil {
				o.skipped++
				return nil
			}
			for i, a := range as {
				o.assessed++
				if a.Session == session {
					o.at[callKey{a.Session, a.CallID}] = place{m.Sequence, uint64(i)}
				}
			}
			return nil
		})
		if err != nil {
			return o, nil, fmt.Errorf("recoverer: rebuild awaiting review: %w", err)
		}
	}
	sort.Strings(sessions)
	return o, sessions, nil
}

// foundAssessment is a call's assessment from its session log, with the
// place of its latest published assessment.
type foundAssessment struct {
	at place
	n  int // the call's place in its log, for calls of equal place
	a  schema.Assessment
}

// classifyInOrder classifies the session logs and returns their
// assessments in the order they were published (calls never published
// last, in log order); unreadable counts the logs too large or corrupt
// to classify.
func (r *Recoverer) classifyInOrder(ctx context.Context, sessions []string, order map[callKey]place) (all []foundAssessment, unreadable int, err error) {
	for _, session := range sessions {
		as, err := r.classifyLog(ctx, session)
		if err != nil {
			if errors.As(err, new(*schema.Error)) {
				// A log that is too large or corrupt: the live classifier
				// assesses none of its calls either.
				unreadable++
				r.log.Warn().Err(err).Str("session", session).Msg("rebuild awaiting review: session log not classified")
				continue
			}
			return nil, 0, fmt.Errorf("recoverer: rebuild awaiting review: %w", err)
		}
		for i, a := range as {
			at, ok := order[callKey{a.Session, a.CallID}]
			if !ok {
				at = place{math.MaxUint64, 0}
			}
			all = append(all, foundAssessment{at, i, a})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.at != b.at {
			return a.at.seq < b.at.seq || a.at.seq == b.at.seq && a.at.member < b.at.member
		}
		return a.n < b.n
	})
	return all, unreadable, nil
}

// forgetReviewed takes out of w the calls settled by a completed review,
// reading each session's reviews once.
func (r *Recoverer) forgetReviewed(ctx context.Context, w *awaiting) error {
	bySession := map[string][]string{}
	for _, a := range w.list("") {
		bySession[a.Session] = append(bySession[a.Session], a.CallID)
	}
	for session, calls := range bySession {
		settled, err := r.completedReviews(ctx, session, calls)
		if err != nil {
			return fmt.Errorf("recoverer: rebuild awaiting review: %w", err)
		}
		for _, id := range settled {
			w.forget(session, id)
		}
	}
	return nil
}

// forgetPlanned takes out of w and unplanned the calls a signed plan in
// jw_plans retries; untrusted counts the records no trusted planner
// signed.
func (r *Recoverer) forgetPlanned(ctx context.Context, w *awaiting, unplanned map[callKey]bool) (untrusted int, err error) {
	recs, err := r.issuer.planRecords(ctx)
	if err != nil {
		return 0, err
	}
	for _, rec := range recs {
		p := rec.Plan
		if !r.signedPlan(p) {
			// Anyone with the worker credential can write jw_plans: a
			// record whose plan no trusted planner signed issued nothing.
			untrusted++
			continue
		}
		w.forget(p.Session, p.PriorCallID)
		delete(unplanned, callKey{p.Session, p.PriorCallID})
	}
	return untrusted, nil
}

// logCall is what classifyLog keeps of a call in one pass over its log.
type logCall struct {
	contract   effect.Contract
	status     schema.Status
	stage      schema.Stage
	marker     bool
	started    bool
	legacy     bool // no operation: never assessed
	superseded bool // a later attempt retries it
	closed     bool // a result, or a fence of its writer
}

// classifyLog loads session's log and returns, in log order, the
// assessment (recovery.Inspect) of every call that is the latest attempt
// of its chain, closed (its result recorded, or its writer fenced: the
// calls the live classifier assesses) and classified needs_review or
// retry_allowed. One pass finds those calls (recovery.Classify on what the
// log says of each); Inspect then confirms each over the whole log (a
// corrupt log is an error). Errors are *schema.Error for a log that is
// what it is (too large, corrupt), others for a failed read.
func (r *Recoverer) classifyLog(ctx context.Context, session string) ([]schema.Assessment, error) {
	h, err := r.t.Logs().Load(ctx, session)
	if err != nil {
		return nil, err
	}
	calls := map[string]*logCall{}
	var ids []string
	var open recovery.OpenCalls[struct{}]
	for _, ev := range h {
		open.Observe(ev, nil, func(id string, _ struct{}) {
			if c := calls[id]; c != nil {
				c.closed = true
			}
		})
		switch {
		case ev.Type == schema.TypeCall && ev.Call != nil:
			c := &logCall{marker: ev.Call.StartMarker, started: ev.Call.Started, legacy: ev.Call.Operation == nil}
			if op := ev.Call.Operation; op != nil {
				c.contract = op.Contract
				if op.Retry != nil {
					if p := calls[op.Retry.PriorCallID]; p != nil {
						p.superseded = true
					}
				}
			}
			if _, seen := calls[ev.Call.CallID]; !seen {
				ids = append(ids, ev.Call.CallID)
			}
			calls[ev.Call.CallID] = c
		case ev.Type == schema.TypeStarted && ev.Started != nil:
			if c := calls[ev.Started.CallID]; c != nil {
				c.started = true
			}
		case ev.Type == schema.TypeResult && ev.Result != nil:
			if c := calls[ev.Result.CallID]; c != nil {
				c.status, c.stage, c.closed = ev.Result.Status, ev.Result.Stage, true
			}
		}
	}
	var out []schema.Assessment
	for _, id := range ids {
		c := calls[id]
		if c.legacy || c.superseded || !c.closed {
			continue
		}
		if _, _, d := recovery.Classify(c.status, c.stage, c.marker, c.started, c.contract); d != schema.DecisionNeedsReview && d != schema.DecisionRetryAllowed {
			continue
		}
		a, err := inspect(h, id)
		var se *schema.Error
		if errors.As(err, &se) && se.Code != schema.CodeCorruptHistory && se.Code != schema.CodeHistoryTooLarge && se.Code != schema.CodeFieldTooLong {
			continue // this call only (superseded, unknown, legacy)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// completedReviews returns the calls among calls of session whose deciding
// review (FoldReviews over JW_REVIEWS, each review checked as the review
// consumer checks it) is a trusted completed one.
func (r *Recoverer) completedReviews(ctx context.Context, session string, calls []string) ([]string, error) {
	want := make(map[string][]recovery.ReviewEntry, len(calls))
	for _, id := range calls {
		want[id] = nil
	}
	err := r.t.Reader().ReadSubject(ctx, r.t.Names().StreamName("REVIEWS"), r.t.Names().ReviewsSubject(session), func(m *jetstream.RawStreamMsg) error {
		rv, err := r.reviews.check(session, m.Data)
		if es, ok := want[rv.CallID]; ok {
			want[rv.CallID] = append(es, recovery.ReviewEntry{Review: rv, Err: err, Seq: m.Sequence})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read reviews of %s: %w", session, err)
	}
	var out []string
	for id, es := range want {
		f := recovery.FoldReviews(session, id, es)
		if f.Decides >= 0 && es[f.Decides].Review.Verdict == schema.VerdictCompleted {
			out = append(out, id)
		}
	}
	return out, nil
}

// sessionsOf lists the sessions with messages on a topology subject
// <prefix>.<kind>.<session> of streamName.
func sessionsOf(ctx context.Context, t *stream.Topology, streamName, pre string) ([]string, error) {
	st, err := t.JS.Stream(ctx, streamName)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(pre+"*"))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		out = append(out, strings.TrimPrefix(subj, pre))
	}
	sort.Strings(out)
	return out, nil
}
