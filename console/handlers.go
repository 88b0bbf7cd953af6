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
	// Nav is the active tab: "awaiting", "sessions", "plans".
	Nav  string
	CSRF string
	// Key is the console's reviewer public key.
	Key string
	// Kinds are the decisions a call's form offers.
	Kinds []decisionKind
	Data  any
	Flash *flash
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, p page) {
	p.CSRF = c.csrfToken(c.browserID(w, r))
	p.Key, _ = c.cfg.Key.PublicKey()
	p.Kinds = decisionKinds
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
	c.render(w, r, "awaiting.html", page{Title: "Awaiting review", Nav: "awaiting", Data: c.loadAwaiting(r.Context())})
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
		if fl, ok := c.flashes.get(id, c.browserID(w, r)); ok {
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
// can make: its name (the form's "kind"), the choices it offers and how a
// choice is signed and submitted.
type decisionKind struct {
	Name    string
	Label   string
	Choices []choice
	submit  func(c *Console, ctx context.Context, session, call, choice, operator, evidence string) flash
}

// choice is one value of a decision, with what it means.
type choice struct{ Value, Meaning string }

// decisionKinds are the decisions the console signs. Today: the review.
var decisionKinds = []decisionKind{{
	Name:  "review",
	Label: "Sign a review",
	Choices: []choice{
		{string(schema.VerdictNotExecuted), "the call had no effect: one retry may be prepared"},
		{string(schema.VerdictCompleted), "the call took effect: no retry, ever (final)"},
		{string(schema.VerdictUncertain), "you cannot tell: the call stays needs_review"},
	},
	submit: (*Console).submitReview,
}}

func findKind(name string) (decisionKind, bool) {
	for _, k := range decisionKinds {
		if k.Name == name {
			return k, true
		}
	}
	return decisionKind{}, false
}

// handleDecide signs and submits a decision on a call (POST /decide:
// kind, session, call, choice, operator, evidence, csrf) and redirects
// (303) to the call's page, which shows the outcome.
func (c *Console) handleDecide(w http.ResponseWriter, r *http.Request) {
	browser, err := c.checkPost(w, r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
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
	choice := r.PostFormValue("choice")
	known := false
	for _, ch := range kind.Choices {
		known = known || ch.Value == choice
	}
	operator, evidence := strings.TrimSpace(r.PostFormValue("operator")), strings.TrimSpace(r.PostFormValue("evidence"))
	var fl flash
	switch {
	case !known:
		fl = flash{Kind: kind.Name, Title: "Not signed", Code: string(schema.CodeBadRequest), Message: fmt.Sprintf("choose one of the %s's verdicts", kind.Name)}
	case operator == "" || evidence == "":
		fl = flash{Kind: kind.Name, Title: "Not signed", Code: string(schema.CodeBadRequest), Message: "operator and evidence are required: say who you are and what you checked"}
	case len(operator) > schema.MaxFieldBytes || len(evidence) > schema.MaxFieldBytes:
		fl = flash{Kind: kind.Name, Title: "Not signed", Code: string(schema.CodeFieldTooLong), Message: fmt.Sprintf("operator and evidence are limited to %d bytes each", schema.MaxFieldBytes)}
	default:
		fl = kind.submit(c, r.Context(), session, call, choice, operator, evidence)
	}
	c.redirect(w, r, browser, session, call, fl)
}

// submitReview signs a review with the console's key and submits it as
// `jingwei review` does (service.Client.SubmitReview).
func (c *Console) submitReview(ctx context.Context, session, call, verdict, operator, evidence string) flash {
	fl := flash{Kind: "review"}
	rv, err := recovery.SignReview(c.cfg.Key, schema.Review{
		V: schema.Version, Session: session, CallID: call,
		Operator: operator, Evidence: evidence, Verdict: schema.Verdict(verdict),
		At: c.cfg.Now().UTC().Format(time.RFC3339),
	})
	if err != nil {
		p := newProblem(err)
		fl.Title, fl.Code, fl.Message = "Not signed", p.Code, p.Message
		return fl
	}
	rc, err := c.reviewer.SubmitReview(ctx, rv)
	if rc.Check != nil {
		fl.Check = rc.Check
	}
	log := c.cfg.Logger.Info().Str("session", session).Str("call_id", call).Str("verdict", verdict).Str("operator", operator).Uint64("seq", rc.Seq)
	switch {
	case err != nil && !rc.Published():
		p := newProblem(err)
		fl.Title, fl.Code, fl.Message, fl.Hint = "Refused: nothing published", p.Code, p.Message, p.Hint
		if errors.Is(err, schema.ErrUnknownCall) || errors.Is(err, schema.ErrSupersededCall) {
			fl.Hint = "Review the latest attempt of a call in the session's log."
		}
		log.Str("code", p.Code).Msg("console: review refused")
		c.cfg.Metrics.Reviewed(schema.Verdict(verdict), "refused")
	case err != nil:
		p := newProblem(err)
		fl.Title, fl.Code, fl.Message = "Published but ignored by the recovery worker", p.Code, p.Message
		if p.Code == string(schema.CodeReviewConflict) {
			fl.Hint = "A trusted completed review of this call is on record, and completed is final."
		} else {
			fl.Hint = "The review changes nothing: the recovery worker trusts only the keys of its --trust-reviewers; the console signs with " + rv.Signer + "."
		}
		log.Str("code", p.Code).Msg("console: review ignored")
		c.cfg.Metrics.Reviewed(schema.Verdict(verdict), "ignored")
	default:
		fl.OK = true
		fl.Title = fmt.Sprintf("Review %s published (%s seq %d) and accepted", verdict, rc.Stream, rc.Seq)
		fl.Hint = reviewHint(schema.Verdict(verdict))
		result := "accepted"
		if rc.Check == nil {
			fl.Title = fmt.Sprintf("Review %s published (%s seq %d); the recovery worker did not say how it judges it", verdict, rc.Stream, rc.Seq)
			result = "unjudged"
		}
		c.cfg.Metrics.Reviewed(schema.Verdict(verdict), result)
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
		http.Error(w, err.Error(), http.StatusForbidden)
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
