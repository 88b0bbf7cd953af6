package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

// MaxSessions is how many sessions /sessions lists (the most recently
// written first).
const MaxSessions = 500

// problem is an error as a page shows it: its code (if it has one) and
// message.
type problem struct {
	Code    string
	Message string
	Hint    string
	// Latest is the latest attempt of the chain, for superseded_call.
	Latest string
}

func newProblem(err error) *problem {
	if err == nil {
		return nil
	}
	p := &problem{Message: err.Error()}
	var e *schema.Error
	if errors.As(err, &e) {
		p.Code, p.Message, p.Latest = string(e.Code), e.Message, e.Latest
		p.Hint = refusalHint(e.Code)
	}
	if errors.Is(err, service.ErrNoService) {
		p.Hint = "No recovery worker answers: start 'jingwei serve' or 'jingwei recover' against this server."
	}
	return p
}

// eventView is one event of a session log as a page shows it.
type eventView struct {
	Seq    uint64
	Epoch  uint64
	At     string
	Type   string
	CallID string
	// What is the event in a line: the tool and its key, a result's
	// status, a fence's owner.
	What string
	// Detail is the event's payload as indented JSON: a call's arguments,
	// a result's output or error.
	Detail string
	// Status is a result's status ("" for the other types), for styling.
	Status string
}

func viewEvent(ev schema.Event) eventView {
	v := eventView{Seq: ev.Seq, Epoch: ev.Epoch, Type: ev.Type, CallID: ev.CallID()}
	if !ev.At.IsZero() {
		v.At = ev.At.UTC().Format(time.RFC3339)
	}
	switch {
	case ev.Call != nil:
		c := ev.Call
		v.What = c.Tool
		if op := c.Operation; op != nil {
			v.What += fmt.Sprintf(" · task %s · key %s · %s", op.Task, op.Key, op.Contract)
			if op.Retry != nil {
				v.What += " · retry"
			}
		}
		if c.RequestID != "" {
			v.What += " · request " + c.RequestID
		}
		if c.Started {
			v.What += " · body started" // the combined form: the call and its start in one event
		}
		v.Detail = pretty(c.Arguments)
	case ev.Started != nil:
		v.What = "body started"
	case ev.Result != nil:
		r := ev.Result
		v.Status = string(r.Status)
		v.What = string(r.Status)
		if r.Stage != "" {
			v.What += " at " + string(r.Stage)
		}
		if r.Error != "" {
			v.Detail = r.Error
		} else {
			v.Detail = pretty(r.Output)
		}
	case ev.Fence != nil:
		v.What = fmt.Sprintf("fenced: epoch %d, owner %s", ev.Fence.Epoch, ev.Fence.Owner)
	case ev.ApprovalRequest != nil:
		v.What = "waits for approval until " + ev.ApprovalRequest.Deadline.UTC().Format(time.RFC3339)
	case ev.Approval != nil:
		a := ev.Approval
		v.What = fmt.Sprintf("%s by %s (signer %s)", a.Decision, a.Approver, short(a.Signer))
		v.Detail = a.Reason
	case ev.Stop != nil:
		v.What = fmt.Sprintf("task %s stopped by %s", ev.Stop.Task, ev.Stop.By)
		v.Detail = ev.Stop.Reason
	}
	return v
}

// pretty indents JSON and writes <, > and & as themselves (not \u003c…),
// so a reviewer reads the arguments as the agent sent them; the page's
// template escapes them for HTML. Anything that is not JSON is returned as
// it is.
func pretty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(raw)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// callView is everything the console knows about one call.
type callView struct {
	Session, CallID string
	Assessment      *schema.Assessment
	AssessErr       *problem
	Why             string
	// Call is the call's tool.call (nil when the log does not hold it).
	Call *schema.Call
	Args string
	// Chain are the events of the call's chain (every attempt) in log
	// order.
	Chain    []eventView
	ChainErr *problem
	// Reviews are the reviews of the call, as the recovery worker judges
	// them.
	Reviews    []service.ReviewCheck
	ReviewsErr *problem
	// Latest is the chain's latest attempt when the call is not it
	// (superseded_call): the one to decide on.
	Latest string
	// TraceURL links the call to its trace (Config.TraceURL), "" for none.
	TraceURL string
	// Plans are the plan records of the call's chain.
	Plans []stream.PlanRecord
	// CanPrepare is set when the decision may allow a plan: retry_allowed,
	// or needs_review (a trusted not_executed review allows it).
	CanPrepare bool
	// CanDecide is set when a review can change the outcome: the latest
	// attempt of a call that did not complete by its log.
	CanDecide bool
	// WriterMayRun is set when the call's body may still be running (its
	// evidence is no_result, timeout or cancelled), as `jingwei status`
	// says in its WRITER column: before signing not_executed the
	// reviewer must fence what it writes.
	WriterMayRun bool
	// Approval is what the session log says about the call's approval.
	Approval approvalState
	// Decide are the decisions the call's page offers a form for: a
	// review while it needs review, an answer while it waits for
	// approval.
	Decide []decisionKind
	// Final is the accepted completed review of the call, when there is
	// one: the verdict is final, no review changes it, no retry runs.
	Final *service.ReviewCheck
	// Denied is set when the call ended rejected at stage approval (an
	// approver's denial, the deadline, a stopped task): a retry needs a
	// fresh approval, whatever the decision table says of it.
	Denied bool
	// Waited is how long the call has waited since its latest event (for
	// a call awaiting review: since it was fenced or ended).
	Waited string
}

// waited says how long ago at was, to the second ("" for a zero time).
func waited(at, now time.Time) string {
	if at.IsZero() {
		return ""
	}
	return max(now.Sub(at), 0).Round(time.Second).String()
}

// loadCall gathers a call's view: its assessment (jw.api.inspect), the
// events of its chain (the session log), its reviews (jw.api.status) and
// its plans (jw_plans). Each part that fails says why on the page; the
// others are still shown.
func (c *Console) loadCall(ctx context.Context, session, callID string, a *schema.Assessment) callView {
	v := callView{Session: session, CallID: callID}
	if a == nil {
		got, err := c.reviewer.Inspect(ctx, session, callID)
		if err != nil {
			v.AssessErr = newProblem(err)
		} else {
			a = &got
		}
	}
	chain := []string{callID}
	if p := v.AssessErr; p != nil && p.Code == string(schema.CodeSupersededCall) && p.Latest != "" {
		// A retried call: show the whole chain, up to the latest attempt,
		// whose assessment is the one that counts.
		v.Latest = p.Latest
		if la, err := c.reviewer.Inspect(ctx, session, p.Latest); err == nil && slices.Contains(la.Chain, callID) {
			chain = la.Chain
		}
	}
	if a != nil {
		v.Assessment = a
		v.Why = why(*a)
		if len(a.Chain) > 0 {
			chain = a.Chain
		}
		v.CanPrepare = a.Decision == schema.DecisionRetryAllowed || a.Decision == schema.DecisionNeedsReview
		v.CanDecide = a.Decision == schema.DecisionNeedsReview
	}
	var last time.Time
	if topo, err := c.topology(ctx); err != nil {
		v.ChainErr = newProblem(err)
	} else {
		lctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		h, err := topo.Logs().Load(lctx, session)
		cancel()
		if err != nil {
			v.ChainErr = newProblem(err)
		}
		v.Approval = approvalOf(h, callID)
		inChain := false
		for _, ev := range h {
			id := ev.CallID()
			// The chain's events, and the fences after its first one (a
			// takeover is why an open call can no longer get a result).
			if ev.Fence != nil && inChain {
				v.Chain = append(v.Chain, viewEvent(ev))
				continue
			}
			if id == "" || !slices.Contains(chain, id) {
				continue
			}
			inChain = true
			last = ev.At
			v.Chain = append(v.Chain, viewEvent(ev))
			if ev.Call != nil && id == callID {
				v.Call = ev.Call
				v.Args = pretty(ev.Call.Arguments)
				v.TraceURL = c.traceURL(ctx, topo, session, ev.Seq)
			}
		}
		pctx, pcancel := context.WithTimeout(ctx, c.cfg.Timeout)
		plans, err := topo.Plans().ListPlans(pctx, session)
		pcancel()
		if err == nil {
			for _, p := range plans {
				if slices.Contains(chain, p.Plan.PriorCallID) {
					v.Plans = append(v.Plans, p)
				}
			}
		}
	}
	st, err := c.reviewer.Status(ctx, service.StatusRequest{Session: session, CallID: callID})
	if err != nil {
		v.ReviewsErr = newProblem(err)
	} else {
		v.Reviews = st.Reviews
	}
	for i, rc := range v.Reviews {
		if rc.Accepted && rc.Review.Verdict == schema.VerdictCompleted {
			v.Final = &v.Reviews[i]
			v.CanDecide = false
			break
		}
	}
	v.Denied = v.Approval.denied()
	if v.Assessment != nil {
		v.WriterMayRun = v.CanDecide && recovery.WriterMayRun(v.Assessment.Evidence)
	}
	v.Waited = waited(last, time.Now())
	if v.CanDecide {
		v.Decide = append(v.Decide, reviewKind)
	}
	if v.Approval.Waiting {
		v.Decide = append(v.Decide, approvalKind)
	}
	return v
}

// awaitingView is the front page.
type awaitingView struct {
	// Pending are the calls waiting for approval (at most MaxDetailed);
	// PendingAll counts them all.
	Pending    []pendingView
	PendingAll int
	Detailed   []callView
	OpenCalls  []service.OpenCall
	// Filter is the list's filter and page.
	Filter listFilter
	// ReviewAll counts the calls awaiting review that match the filter.
	ReviewAll int
	Plans     service.PlanCounts
	Err       *problem
}

func (c *Console) loadAwaiting(ctx context.Context, f listFilter) awaitingView {
	v := awaitingView{Filter: f}
	st, err := c.reviewer.Status(ctx, service.StatusRequest{})
	if err != nil {
		v.Err = newProblem(err)
		return v
	}
	pending := filterList(st.AwaitingApproval, f, func(w service.WaitingApproval) []string {
		return []string{w.Session, w.CallID, w.Tool, w.Task, "awaiting_approval"}
	})
	v.PendingAll = len(pending)
	v.Pending = c.loadPending(ctx, pageOf(f, pending))
	aw := filterList(st.AwaitingReview, f, func(a schema.Assessment) []string {
		return []string{a.Session, a.CallID, a.Tool, string(a.Outcome), string(a.Decision), a.Evidence}
	})
	v.ReviewAll = len(aw)
	sort.SliceStable(aw, func(i, j int) bool {
		if aw[i].Session != aw[j].Session {
			return aw[i].Session < aw[j].Session
		}
		return aw[i].CallID < aw[j].CallID
	})
	aw = pageOf(f, aw)
	for i := range aw {
		v.Detailed = append(v.Detailed, c.loadCall(ctx, aw[i].Session, aw[i].CallID, &aw[i]))
	}
	v.OpenCalls = st.OpenCalls
	v.Plans = st.Plans
	return v
}

// sessionRow is one session of /sessions.
type sessionRow struct {
	Session string
	Events  uint64
}

func (c *Console) loadSessions(ctx context.Context) ([]sessionRow, error) {
	topo, err := c.topology(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	s, err := c.hostJS.Stream(ctx, topo.Names().StreamName("EVENTS"))
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(topo.Names().EventsSubject("*")))
	if err != nil {
		return nil, err
	}
	var rows []sessionRow
	for subj, n := range info.State.Subjects {
		rows = append(rows, sessionRow{Session: stream.SessionOf(subj), Events: n})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Session < rows[j].Session })
	if len(rows) > MaxSessions {
		rows = rows[:MaxSessions]
	}
	return rows, nil
}

// sessionView is /session.
type sessionView struct {
	Session string
	Events  []eventView
	Err     *problem
	Plans   []stream.PlanRecord
}

func (c *Console) loadSession(ctx context.Context, session string) sessionView {
	v := sessionView{Session: session}
	topo, err := c.topology(ctx)
	if err != nil {
		v.Err = newProblem(err)
		return v
	}
	lctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	h, err := topo.Logs().Load(lctx, session)
	if err != nil {
		v.Err = newProblem(err)
	}
	for _, ev := range h {
		v.Events = append(v.Events, viewEvent(ev))
	}
	if plans, err := topo.Plans().ListPlans(lctx, session); err == nil {
		v.Plans = plans
	}
	return v
}

func (c *Console) loadPlans(ctx context.Context) ([]stream.PlanRecord, error) {
	topo, err := c.topology(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	return topo.Plans().ListPlans(ctx, "")
}

// short shortens a key or signer for a table, keeping its start.
func short(s string) string {
	if len(s) <= 16 {
		return s
	}
	return s[:12] + "…"
}

// provenance says where a review came from: "probe <name>" for an
// automated review, "person" otherwise.
func provenance(r schema.Review) string {
	if r.Automated() {
		return "probe " + r.Probe
	}
	return "person"
}

// reviewState says how the recovery worker judges a review, in words.
func reviewState(ch service.ReviewCheck) string {
	switch {
	case ch.Accepted && ch.Review.Automated() && ch.Review.Verdict == schema.VerdictUncertain:
		return "accepted, evidence only (the probe could not decide)"
	case ch.Accepted && ch.Decides:
		return "accepted, decides"
	case ch.Accepted:
		return "accepted, superseded by a later review"
	}
	return "ignored: " + strings.TrimSpace(ch.Code)
}
