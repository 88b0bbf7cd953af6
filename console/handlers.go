package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

var funcs = template.FuncMap{
	"pager":       pager,
	"provenance":  provenance,
	"short":       short,
	"reviewState": reviewState,
	"reviewHint":  reviewHint,
	"pretty":      pretty,
	"time": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"callURL": func(session, call string) string {
		return "/call?" + url.Values{"session": {session}, "call": {call}}.Encode()
	},
	"sessionURL": func(session string) string {
		return "/session?" + url.Values{"session": {session}}.Encode()
	},
}

// page is what every template gets.
type page struct {
	Title string
	// Nav is the active tab: "awaiting", "sessions", "plans", "stopped".
	Nav  string
	CSRF string
	// Reviewers and Approvers are the trusted keys the console knows,
	// with their names, for the browser's key panel (nil: unknown).
	Reviewers, Approvers []namedKey
	// KnowsReviewers and KnowsApprovers say whether the console knows the
	// trusted keys of each kind.
	KnowsReviewers, KnowsApprovers bool
	Data                           any
	Flash                          *flash
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, p page) {
	p.CSRF = c.csrfToken(c.loginID(r))
	p.Reviewers, p.KnowsReviewers = listKeys(c.cfg.TrustedReviewers, c.cfg.ReviewerNames), c.cfg.TrustedReviewers != nil
	p.Approvers, p.KnowsApprovers = listKeys(c.cfg.TrustedApprovers, c.cfg.ApproverNames), c.cfg.TrustedApprovers != nil
	var b bytes.Buffer
	if err := c.tmpl.ExecuteTemplate(&b, name, p); err != nil {
		c.cfg.Logger.Error().Err(err).Str("template", name).Msg("console: render")
		http.Error(w, "console: cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = b.WriteTo(w)
}

func (c *Console) handleAwaiting(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "awaiting.html", page{Title: "Awaiting review", Nav: "awaiting", Data: c.loadAwaiting(r.Context(), filterOf(r.URL.Query()))})
}

// target reads and checks the session and call of a request.
func target(vals url.Values) (session, call string, err error) {
	session, call = vals.Get("session"), vals.Get("call")
	if err := stream.ValidateSession(session); err != nil {
		return "", "", fmt.Errorf("session: %w", err)
	}
	if call == "" || len(call) > schema.MaxFieldBytes {
		return "", "", errors.New("call: a call id is required")
	}
	return session, call, nil
}

func (c *Console) handleCall(w http.ResponseWriter, r *http.Request) {
	session, call, err := target(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := page{Title: "Call " + call, Nav: "awaiting", Data: c.loadCall(r.Context(), session, call, nil)}
	if id := r.URL.Query().Get("outcome"); id != "" {
		if fl, ok := c.flashes.get(id, c.loginID(r)); ok {
			p.Flash = &fl
		}
	}
	c.render(w, r, "call.html", p)
}

func (c *Console) handleSessions(w http.ResponseWriter, r *http.Request) {
	rows, err := c.loadSessions(r.Context())
	c.render(w, r, "sessions.html", page{Title: "Sessions", Nav: "sessions", Data: struct {
		Rows []sessionRow
		Err  *problem
		Max  int
	}{rows, newProblem(err), MaxSessions}})
}

func (c *Console) handleSession(w http.ResponseWriter, r *http.Request) {
	session := r.URL.Query().Get("session")
	if err := stream.ValidateSession(session); err != nil {
		http.Error(w, "session: "+err.Error(), http.StatusBadRequest)
		return
	}
	c.render(w, r, "session.html", page{Title: "Session " + session, Nav: "sessions", Data: c.loadSession(r.Context(), session)})
}

func (c *Console) handlePlans(w http.ResponseWriter, r *http.Request) {
	plans, err := c.loadPlans(r.Context())
	c.render(w, r, "plans.html", page{Title: "Retry plans", Nav: "plans", Data: struct {
		Plans []stream.PlanRecord
		Err   *problem
	}{plans, newProblem(err)}})
}

// decisionKind is one kind of signed decision on a call the console's form
// offers: its name (the form's "kind"), the choices it offers and how a
// signed decision is checked and relayed. The person signs in their
// browser (static/sign.js): the form's "signed" is the signed review or
// approval as JSON; its "operator" and "evidence" fields are the review's
// operator and evidence, or the approval's approver and reason.
type decisionKind struct {
	Name    string
	Label   string
	Hint    string
	Legend  string
	Choices []choice
	// Operator and Evidence label the form's two text fields.
	Operator, Evidence string
	relay              func(c *Console, ctx context.Context, session, call string, signed []byte) flash
}

// choice is one value of a decision, with what it means.
type choice struct{ Value, Meaning string }

// reviewKind and approvalKind are the decisions the console relays: a
// review of a call awaiting review, an answer to a call waiting for
// approval, each signed by a person's key in their browser.
var (
	reviewKind = decisionKind{
		Name:   "review",
		Label:  "Sign a review",
		Hint:   "Check the business system first: a review is a trusted statement, never a guess. Your browser signs it with your key (see “Your key” above); the console only relays it.",
		Legend: "verdict",
		Choices: []choice{
			{string(schema.VerdictNotExecuted), "the call had no effect: one retry may be prepared"},
			{string(schema.VerdictCompleted), "the call took effect: no retry, ever (final)"},
			{string(schema.VerdictUncertain), "you cannot tell: the call stays needs_review"},
		},
		Operator: "operator", Evidence: "evidence",
		relay: (*Console).relayReview,
	}
	approvalKind = decisionKind{
		Name:   "approval",
		Label:  "Approve or deny",
		Hint:   "The call's body has not started: it waits for this answer until its deadline. Your browser signs the answer with your key; it is bound to this call only.",
		Legend: "answer",
		Choices: []choice{
			{string(schema.Approved), "the body may start, once"},
			{string(schema.Denied), "the call ends rejected at stage approval; the body never runs"},
		},
		Operator: "approver", Evidence: "reason",
		relay: (*Console).relayApproval,
	}
)

// decisionKinds are every decision the console relays.
var decisionKinds = []decisionKind{reviewKind, approvalKind}

func findKind(name string) (decisionKind, bool) {
	for _, k := range decisionKinds {
		if k.Name == name {
			return k, true
		}
	}
	return decisionKind{}, false
}

// handleDecide relays a decision signed in the browser (POST /decide:
// kind, session, call, signed, csrf) and redirects (303) to the call's
// page, which shows the outcome. The console signs nothing: a form without
// "signed" is refused.
func (c *Console) handleDecide(w http.ResponseWriter, r *http.Request) {
	browser, err := c.checkPost(w, r)
	if err != nil {
		http.Error(w, err.Error(), postStatus(err))
		return
	}
	session, call, err := target(r.PostForm)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	kind, ok := findKind(r.PostFormValue("kind"))
	if !ok {
		http.Error(w, "kind: unknown decision", http.StatusBadRequest)
		return
	}
	var fl flash
	if signed := strings.TrimSpace(r.PostFormValue("signed")); signed == "" {
		fl = flash{Kind: kind.Name, Title: "Refused: nothing published", Code: string(schema.CodeBadRequest),
			Message: "the " + kind.Name + " is not signed: the console holds no key and signs nothing",
			Hint:    "Sign in this page with your own key (“Your key” above: make one, or import the seed jingwei keys new wrote), or with jingwei review/approve --key FILE."}
	} else {
		fl = kind.relay(c, r.Context(), session, call, []byte(signed))
	}
	c.redirect(w, r, browser, session, call, fl)
}

// refusal is a flash for a decision the console refuses before publishing.
func refusal(kind string, err error, hint string) flash {
	p := newProblem(err)
	if p.Code == "" {
		p.Code = string(schema.CodeBadRequest)
	}
	return flash{Kind: kind, Title: "Refused: nothing published", Code: p.Code, Message: p.Message, Hint: hint}
}

// checkReview checks a review signed in the browser before it is
// published: well formed, about this call, an operator that is not blank,
// a signature that verifies under its signer's key, and a signer among
// the trusted reviewers when the console knows them.
func (c *Console) checkReview(session, call string, signed []byte) (schema.Review, error) {
	rv, err := schema.DecodeReview(signed)
	if err != nil {
		return rv, err
	}
	switch {
	case rv.Session != session || rv.CallID != call:
		return rv, schema.Errorf(schema.CodeInvalidReview, "the review is for call %q of session %q, not this call", rv.CallID, rv.Session)
	case strings.TrimSpace(rv.Operator) == "":
		return rv, schema.Errorf(schema.CodeInvalidReview, "the review's operator is blank")
	case rv.Automated():
		return rv, schema.Errorf(schema.CodeInvalidReview, "the review names probe %q: the console publishes persons' reviews, a probe's come from a prober", rv.Probe)
	}
	// The signature alone first: a forged or unsigned review is refused
	// whatever the signer claims to be.
	if err := recovery.VerifyReview(rv, recovery.TrustedKeys{rv.Signer: {}}); err != nil {
		return rv, err
	}
	if t := c.cfg.TrustedReviewers; t != nil && !t.Has(rv.Signer) {
		return rv, schema.Errorf(schema.CodeInvalidReview, "the review is signed by %s, which is not a trusted reviewer key: the recovery worker would ignore it", rv.Signer)
	}
	return rv, nil
}

// relayReview checks a review signed in the browser (checkReview) and
// submits it as `jingwei review` does (service.Client.SubmitReview), then
// reports how the recovery worker judges it.
func (c *Console) relayReview(ctx context.Context, session, call string, signed []byte) flash {
	rv, err := c.checkReview(session, call, signed)
	if err != nil {
		fl := refusal("review", err, "")
		if errors.Is(err, recovery.ErrBadSignature) || errors.Is(err, recovery.ErrUnsignedReview) || errors.Is(err, recovery.ErrNotUserKey) {
			fl.Hint = "Only a review signed by a person's own key counts; the console signs nothing."
		} else if rv.Signer != "" && c.cfg.TrustedReviewers != nil && !c.cfg.TrustedReviewers.Has(rv.Signer) {
			fl.Hint = "Ask an administrator to add the line “" + rv.Signer + " <your name>” to the trusted reviewers file (recover --trust-reviewers, and this console's --trust-reviewers)."
		}
		c.cfg.Logger.Info().Str("session", session).Str("call_id", call).Str("signer", rv.Signer).Str("code", fl.Code).Msg("console: review refused before publishing")
		c.cfg.Metrics.Reviewed(rv.Verdict, "refused")
		return fl
	}
	fl := flash{Kind: "review"}
	verdict := string(rv.Verdict)
	who := signedBy(c.reviewerName(rv.Signer), rv.Signer)
	rc, err := c.reviewer.SubmitReview(ctx, rv)
	if rc.Check != nil {
		fl.Check = rc.Check
	}
	log := c.cfg.Logger.Info().Str("session", session).Str("call_id", call).Str("verdict", verdict).Str("signer", rv.Signer).Str("name", c.cfg.ReviewerNames.Name(rv.Signer)).Uint64("seq", rc.Seq)
	switch {
	case err != nil && !rc.Published():
		p := newProblem(err)
		fl.Title, fl.Code, fl.Message, fl.Hint = "Refused: nothing published", p.Code, p.Message, p.Hint
		if errors.Is(err, schema.ErrUnknownCall) || errors.Is(err, schema.ErrSupersededCall) {
			fl.Hint = "Review the latest attempt of a call in the session's log."
		}
		log.Str("code", p.Code).Msg("console: review refused")
		c.cfg.Metrics.Reviewed(rv.Verdict, "refused")
	case err != nil:
		p := newProblem(err)
		fl.Title, fl.Code, fl.Message = "Published but ignored by the recovery worker", p.Code, p.Message
		if p.Code == string(schema.CodeReviewConflict) {
			fl.Hint = "A trusted completed review of this call is on record, and completed is final."
		} else {
			fl.Hint = "The review changes nothing: the recovery worker trusts only the keys of its --trust-reviewers; it is signed by " + who + "."
		}
		log.Str("code", p.Code).Msg("console: review ignored")
		c.cfg.Metrics.Reviewed(rv.Verdict, "ignored")
	default:
		fl.OK = true
		fl.Title = fmt.Sprintf("Review %s by %s published (%s seq %d) and accepted", verdict, who, rc.Stream, rc.Seq)
		fl.Hint = reviewHint(rv.Verdict)
		result := "accepted"
		if rc.Check == nil {
			fl.Title = fmt.Sprintf("Review %s by %s published (%s seq %d); the recovery worker did not say how it judges it", verdict, who, rc.Stream, rc.Seq)
			result = "unjudged"
		}
		c.cfg.Metrics.Reviewed(rv.Verdict, result)
		log.Msg("console: review published")
	}
	return fl
}

// handlePrepare asks jw.api.prepare for a retry plan (POST /prepare:
// session, call, csrf) and redirects (303) to the call's page, which shows
// the plan or the refusal.
func (c *Console) handlePrepare(w http.ResponseWriter, r *http.Request) {
	browser, err := c.checkPost(w, r)
	if err != nil {
		http.Error(w, err.Error(), postStatus(err))
		return
	}
	session, call, err := target(r.PostForm)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fl := flash{Kind: "prepare"}
	plan, err := c.host.Prepare(r.Context(), session, call)
	if err != nil {
		p := newProblem(err)
		fl.Title, fl.Code, fl.Message, fl.Hint = "Retry plan refused", p.Code, p.Message, p.Hint
		c.cfg.Logger.Info().Str("session", session).Str("call_id", call).Str("code", p.Code).Msg("console: plan refused")
		code := schema.Code(p.Code)
		if code == "" {
			code = schema.CodeInternal
		}
		c.cfg.Metrics.Prepared(code)
	} else {
		fl.OK, fl.Plan = true, &plan
		fl.Title = "Retry plan " + plan.PlanID + " issued"
		fl.Hint = fmt.Sprintf("The plan is single-use: a tool worker that owns session %s runs the retry once, with key %s.", plan.Session, plan.Key)
		c.cfg.Logger.Info().Str("session", session).Str("call_id", call).Str("plan_id", plan.PlanID).Msg("console: plan issued")
		c.cfg.Metrics.Prepared("")
	}
	c.redirect(w, r, browser, session, call, fl)
}

func (c *Console) redirect(w http.ResponseWriter, r *http.Request, browser, session, call string, fl flash) {
	fl.browser = browser
	id := c.flashes.put(fl)
	u := "/call?" + url.Values{"session": {session}, "call": {call}, "outcome": {id}}.Encode()
	http.Redirect(w, r, u, http.StatusSeeOther)
	c.live.notify()
}
