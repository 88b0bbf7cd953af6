package chaos

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jingwei/jingwei/schema"
)

// hostTask is one call the host phase moves on.
type hostTask struct {
	action     *action
	key        callKey
	decision   schema.Decision // the latest assessment's, "" when there is none
	concurrent bool
}

// hostPhase is what hosts and reviewers do after a crash, for every action
// not completed yet, in rounds: the latest attempt of each chain is
// prepared (a third of the retry_allowed ones by 3 concurrent prepares);
// a needs_review payment is first reviewed from the ledger (a charge by
// that call: completed; none: not_executed) and then prepared; every plan
// is left to run. A round reads everything back first, so the next round
// sees what the plans did (a retry can itself be left uncertain). It ends
// when nothing is left to do or after HostRounds rounds.
func (h *harness) hostPhase(ctx context.Context) error {
	rng := h.rng(7)
	for round := 1; round <= h.cfg.HostRounds; round++ {
		snap, err := readSnapshot(ctx, h.cl.adminJS, h.runID, h.runID)
		if err != nil {
			return err
		}
		x := newIndex(snap)
		var tasks []hostTask
		waiting := 0
		for i := range h.wl.actions {
			a := &h.wl.actions[i]
			if chainDone(x, a) {
				continue
			}
			for _, hd := range x.heads(a.Session, a.RequestID) {
				if !hd.Final() && round == 1 {
					// Still running, or its lease not expired yet. From
					// the second round on it is prepared anyway: a prepare
					// takes an open call with no live lease over (and
					// answers not_confirmed under a live one).
					waiting++
					continue
				}
				t := hostTask{action: a, key: hd.Key, decision: latestDecision(x, hd.Key)}
				t.concurrent = t.decision == schema.DecisionRetryAllowed && rng.IntN(3) == 0
				tasks = append(tasks, t)
			}
		}
		h.progress.Step(stepHost, fmt.Sprintf("host and reviewer, round %d: %d calls to move on, %d still running", round, len(tasks), waiting))
		if len(tasks) == 0 {
			if waiting == 0 {
				return nil
			}
			sleepCtx(ctx, h.cfg.LeaseTTL+time.Second)
			continue
		}
		var (
			mu    sync.Mutex
			plans []string
			wg    sync.WaitGroup
			sem   = make(chan struct{}, 8)
		)
		for _, t := range tasks {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if id, _ := h.handle(ctx, t.action, t.key, t.decision, t.concurrent); id != "" {
					mu.Lock()
					plans = append(plans, id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		h.waitPlans(ctx, plans, 30*time.Second+3*h.cfg.LeaseTTL)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// chainDone reports an action that needs nothing more: an attempt ended
// ok, a trusted review said its latest attempt completed, or an answer
// refused it; and an action that never became a call (lost: nothing to
// move on).
func chainDone(x *index, a *action) bool {
	chain := x.chain(a.Session, a.RequestID)
	if len(chain) == 0 || x.answers[[2]string{a.Session, a.RequestID}] {
		return true
	}
	for _, ci := range chain {
		if ci.Result != nil && ci.Result.Status == schema.StatusOK {
			return true
		}
		if ci.Successor == "" {
			for _, r := range x.reviews[ci.Key] {
				if r.Review.Verdict == schema.VerdictCompleted {
					return true
				}
			}
		}
	}
	return false
}

// latestDecision is the decision of a call's latest stored assessment.
func latestDecision(x *index, k callKey) schema.Decision {
	as := append([]assessmentMsg(nil), x.assessed[k]...)
	if len(as) == 0 {
		return ""
	}
	sort.Slice(as, func(i, j int) bool { return as[i].Seq < as[j].Seq })
	return as[len(as)-1].Assessment.Decision
}

// handle moves one call on as a host would: a needs_review call is first
// reviewed from the ledger, then prepared; a retry_allowed call is
// prepared, by three concurrent prepares when concurrent is set. A
// transient answer (no service, timeout, internal, not_confirmed) is asked
// again for up to 20 s. It returns the plan id ("" without a plan) and the
// last answer's code; a is nil for a call handled during a pause.
func (h *harness) handle(ctx context.Context, a *action, k callKey, decision schema.Decision, concurrent bool) (string, string) {
	reviewed := false
	doReview := func() {
		if reviewed {
			return
		}
		reviewed = true
		v, err := h.cl.review(ctx, k)
		h.mu.Lock()
		if err != nil {
			h.notes = append(h.notes, fmt.Sprintf("review of %s: %v", ref(k), err))
		} else {
			h.reviews[string(v)]++
		}
		h.mu.Unlock()
	}
	if decision == schema.DecisionNeedsReview && h.probes() {
		// The prober reads the ledger back first; a person reviews only
		// what it could not decide.
		switch h.cl.probeVerdict(ctx, k) {
		case schema.VerdictCompleted:
			return "", "probe_completed"
		case schema.VerdictNotExecuted:
			reviewed = true
		}
	}
	if decision == schema.DecisionNeedsReview {
		doReview()
	}
	var (
		plan      schema.Plan
		code, msg string
	)
	deadline := time.Now().Add(20 * time.Second)
	for first := true; ; first = false {
		if concurrent && first {
			plan, code, msg = h.prepareConcurrently(ctx, k)
		} else {
			plan, code, msg = h.cl.prepare(ctx, k)
		}
		h.mu.Lock()
		h.prepares[code]++
		h.mu.Unlock()
		if code == string(schema.CodeNeedsReview) && !reviewed {
			doReview()
			continue
		}
		transient := code == codeNoService || code == codeTimeout || code == "internal" || code == "not_confirmed" ||
			code == string(schema.CodeNeedsReview) // the review may not be read yet
		if !transient || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	if a != nil {
		note := code
		if msg != "" && code != codePlan {
			if len(msg) > 120 {
				msg = msg[:120] + "…"
			}
			note += ": " + msg
		}
		h.mu.Lock()
		h.hostNotes[a.ID] = note
		h.mu.Unlock()
	}
	if code == codePlan {
		return plan.PlanID, code
	}
	return "", code
}

// prepareConcurrently sends three prepares of one call at once; they must
// agree (groupAgrees). A group that does not is counted.
func (h *harness) prepareConcurrently(ctx context.Context, k callKey) (schema.Plan, string, string) {
	type answer struct {
		plan      schema.Plan
		code, msg string
	}
	var (
		wg  sync.WaitGroup
		out [3]answer
	)
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, c, m := h.cl.prepare(ctx, k)
			out[i] = answer{p, c, m}
		}()
	}
	wg.Wait()
	h.mu.Lock()
	h.concurrent++
	h.mu.Unlock()
	ok := groupAgrees([3]string{out[0].code, out[1].code, out[2].code}, [3]string{out[0].plan.PlanID, out[1].plan.PlanID, out[2].plan.PlanID})
	if !ok {
		var codes []string
		for _, a := range out {
			codes = append(codes, a.code)
		}
		h.mu.Lock()
		h.mismatch = append(h.mismatch, fmt.Sprintf("%s: %v", ref(k), codes))
		h.mu.Unlock()
	}
	for _, a := range out {
		if a.code == codePlan {
			return a.plan, a.code, a.msg
		}
	}
	return out[0].plan, out[0].code, out[0].msg
}

// groupAgrees reports whether three concurrent prepares of one call agree:
// every one answered with the same plan, except that one handled after the
// plan's attempt was already recorded may answer superseded_call (the
// retry is the latest call now) as long as another got the plan.
func groupAgrees(codes, ids [3]string) bool {
	plan := ""
	for i, c := range codes {
		switch {
		case c == codePlan && (plan == "" || ids[i] == plan):
			plan = ids[i]
		case c == codePlan:
			return false // two different plans for one call
		case c != string(schema.CodeSupersededCall):
			return false
		}
	}
	return plan != ""
}

// waitPlans waits until every plan's attempt is on the log with a result,
// or for at most d.
func (h *harness) waitPlans(ctx context.Context, plans []string, d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		left := 0
		for _, id := range plans {
			if _, done := h.live.planRun(id); !done {
				left++
			}
		}
		if left == 0 {
			return
		}
		h.progress.Step(stepHost, fmt.Sprintf("host and reviewer: %d of %d plans still to run", left, len(plans)))
		if time.Now().After(deadline) {
			h.note("%d of %d plans had not run %s after they were issued", left, len(plans), d)
			return
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return
		}
	}
}
