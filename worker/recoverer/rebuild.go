package recoverer

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// rebuildAwaiting fills the awaiting-review set from durable state, so
// that jw.api.status says after a restart what it said before: every
// assessment on JW_ASSESSMENTS in stream order, a batch's members in
// their order (schema.DecodeAssessments; the latest of a call
// decides: needs_review adds it, anything else removes it), then every call
// a trusted completed review settled (JW_REVIEWS, folded as prepare folds
// them) and every call a plan was issued for (jw_plans) is removed. The
// live path (noted, settled) keeps the set up to date from then on. It
// reads every assessment once: its cost grows with the assessments kept
// in JW_ASSESSMENTS. With AutoPlan it also queues for the auto-planner
// every call whose latest assessment is retry_allowed and that has no
// plan in jw_plans.
func (r *Recoverer) rebuildAwaiting(ctx context.Context) error {
	streamName := r.t.StreamName("ASSESSMENTS")
	st, err := r.t.JS.Stream(ctx, streamName)
	if err != nil {
		return fmt.Errorf("recoverer: rebuild awaiting review: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(r.t.AssessmentsSubject("*")))
	if err != nil {
		return fmt.Errorf("recoverer: rebuild awaiting review: list sessions: %w", err)
	}
	type seqd struct {
		seq uint64
		a   schema.Assessment
	}
	var all []seqd
	skipped := 0
	for subj := range info.State.Subjects {
		err := r.t.ReadSubject(ctx, streamName, subj, func(m *jetstream.RawStreamMsg) error {
			// One assessment or a batch, its members in log order (a
			// stable sort keeps them so).
			as, err := schema.DecodeAssessments(m.Data)
			if err != nil {
				skipped++
				return nil
			}
			for _, a := range as {
				all = append(all, seqd{m.Sequence, a})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("recoverer: rebuild awaiting review: %w", err)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	w := newAwaiting(r.awaiting.max)
	// With AutoPlan, the calls whose latest assessment is retry_allowed
	// and that have no plan yet are queued again below: the auto-plan
	// queue of an earlier run lived in its memory only.
	var unplanned map[callKey]bool
	if r.cfg.AutoPlan {
		unplanned = map[callKey]bool{}
	}
	for _, s := range all {
		w.note(s.a)
		if unplanned != nil {
			k := callKey{s.a.Session, s.a.CallID}
			if s.a.Decision == schema.DecisionRetryAllowed {
				unplanned[k] = true
			} else {
				delete(unplanned, k)
			}
		}
	}
	// Settled by a completed review: read each session's reviews once.
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
	recs, err := r.issuer.planRecords(ctx)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		w.forget(rec.Plan.Session, rec.Plan.PriorCallID)
		delete(unplanned, callKey{rec.Plan.Session, rec.Plan.PriorCallID})
	}
	r.awaiting.replace(w)
	for k := range unplanned {
		r.issuer.queue(k.session, k.callID)
	}
	r.log.Info().Int("assessments", len(all)).Int("undecodable", skipped).Int("awaiting_review", len(w.calls)).Msg("awaiting review rebuilt from JW_ASSESSMENTS, JW_REVIEWS and jw_plans")
	return nil
}

// completedReviews returns the calls among calls of session whose deciding
// review (FoldReviews over JW_REVIEWS, each review checked as the review
// consumer checks it) is a trusted completed one.
func (r *Recoverer) completedReviews(ctx context.Context, session string, calls []string) ([]string, error) {
	want := make(map[string][]recovery.ReviewEntry, len(calls))
	for _, id := range calls {
		want[id] = nil
	}
	err := r.t.ReadSubject(ctx, r.t.StreamName("REVIEWS"), r.t.ReviewsSubject(session), func(m *jetstream.RawStreamMsg) error {
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
