package recoverer

import (
	"context"
	"slices"
	"sort"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/worker/service"
)

// Status reports open calls, calls awaiting review and plan counts, for
// one session or (session "") for all. It reads every plan in jw_plans.
//
// A tenant-scoped agent's request (service.Caller(ctx) is its tenant) is
// answered about the tenant's own sessions only: a session of another
// tenant (or of none) is forbidden, and "all" means all of the tenant's,
// without the classifier's fleet-wide counters (Stats stays zero).
func (r *Recoverer) Status(ctx context.Context, session string) (service.Status, error) {
	if session != "" {
		if err := stream.ValidateSession(session); err != nil {
			return service.Status{}, schema.Errorf(schema.CodeBadRequest, "%v", err)
		}
		if err := service.CheckSession(ctx, session); err != nil {
			return service.Status{}, err
		}
	}
	tenant := service.Caller(ctx)
	// mine reports whether the caller may see a session's entries.
	mine := func(s string) bool { return tenant == "" || access.TenantOwns(tenant, s) }
	st := service.Status{Session: session, OpenCalls: r.classify.track.list(session), AwaitingReview: r.awaiting.list(session)}
	if tenant == "" {
		st.Stats = r.Stats()
	} else {
		st.OpenCalls = slices.DeleteFunc(st.OpenCalls, func(c service.OpenCall) bool { return !mine(c.Session) })
		st.AwaitingReview = slices.DeleteFunc(st.AwaitingReview, func(a schema.Assessment) bool { return !mine(a.Session) })
	}
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
		if session != "" && rec.Plan.Session != session || !mine(rec.Plan.Session) || !r.signedPlan(rec.Plan) {
			continue // another session's, or a record no trusted planner signed
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
	if tenant != "" {
		st.AwaitingApproval = slices.DeleteFunc(st.AwaitingApproval, func(w service.WaitingApproval) bool { return !mine(w.Session) })
		st.StoppedTasks = slices.DeleteFunc(st.StoppedTasks, func(s service.StoppedTask) bool { return !mine(s.Session) })
	}
	return st, nil
}
