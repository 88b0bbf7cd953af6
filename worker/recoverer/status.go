package recoverer

import (
	"context"
	"sort"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

// Status reports open calls, calls awaiting review and plan counts, for
// one session or (session "") for all. It reads every plan in jw_plans.
func (r *Recoverer) Status(ctx context.Context, session string) (service.Status, error) {
	if session != "" {
		if err := stream.ValidateSession(session); err != nil {
			return service.Status{}, schema.Errorf(schema.CodeBadRequest, "%v", err)
		}
	}
	st := service.Status{Session: session, OpenCalls: r.classify.track.list(session), AwaitingReview: r.awaiting.list(session), Stats: r.Stats()}
	sort.Slice(st.OpenCalls, func(i, j int) bool {
		a, b := st.OpenCalls[i], st.OpenCalls[j]
		return a.Session < b.Session || a.Session == b.Session && a.Seq < b.Seq
	})
	if st.OpenCalls == nil {
		st.OpenCalls = []service.OpenCall{}
	}
	recs, err := r.issuer.planRecords(ctx)
	if err != nil {
		return service.Status{}, err
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
	if err := r.approvalStatus(ctx, session, &st); err != nil {
		return service.Status{}, err
	}
	return st, nil
}
