package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/fence"
)

// clients are the harness's connections, one per role it plays: the agent
// publishes requests, the reviewer publishes signed reviews, the host asks
// the jingwei service for plans and status, and admin reads every stream
// back. Each connects with its role's key, as a program of that role
// elsewhere would.
type clients struct {
	admin, agent, reviewer, host *nats.Conn
	adminJS, agentJS, reviewerJS jetstream.JetStream
	reviewerKey                  nkeys.KeyPair
}

// connectRoles connects the harness's roles to url, each as conn says.
func connectRoles(ctx context.Context, url string, conn func(access.Role) natsnode.ConnectConfig, reviewer nkeys.KeyPair, timeout time.Duration) (*clients, error) {
	c := &clients{reviewerKey: reviewer}
	for _, r := range []struct {
		role access.Role
		nc   **nats.Conn
	}{{access.RoleAdmin, &c.admin}, {access.RoleAgent, &c.agent}, {access.RoleReviewer, &c.reviewer}, {access.RoleHost, &c.host}} {
		cc := conn(r.role)
		cc.URL, cc.Name, cc.ConnectTimeout = url, "jingwei chaos "+string(r.role), timeout
		nc, err := natsnode.Connect(ctx, cc)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("connect as %s: %w", r.role, err)
		}
		*r.nc = nc
	}
	c.adminJS, _ = jetstream.New(c.admin)
	c.agentJS, _ = jetstream.New(c.agent)
	c.reviewerJS, _ = jetstream.New(c.reviewer)
	return c, nil
}

func (c *clients) close() {
	for _, nc := range []*nats.Conn{c.admin, c.agent, c.reviewer, c.host} {
		if nc != nil {
			nc.Close()
		}
	}
}

// apiError is the error body of a jingwei service answer.
type apiError struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// codeNoService is the outcome of a request nobody answered (the recovery
// worker is down, or restarting).
const (
	codeNoService = "no_service"
	codeTimeout   = "timeout"
	codePlan      = "plan"
)

// request sends body to jw.api.<endpoint> as the host and decodes the
// answer into out; an error answer returns its code.
func (c *clients) request(ctx context.Context, endpoint string, body, out any) (code, msg string) {
	b, _ := json.Marshal(body)
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	m, err := c.host.RequestWithContext(rctx, subjectPrefix+".api."+endpoint, b)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return codeNoService, err.Error()
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return codeTimeout, err.Error()
	case err != nil:
		return "error", err.Error()
	}
	var e apiError
	if json.Unmarshal(m.Data, &e) == nil && e.Error != nil {
		return e.Error.Code, e.Error.Message
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return "bad_answer", err.Error()
	}
	return "", ""
}

// prepare asks jw.api.prepare for a plan for one call. code is "plan" when
// one came back, else the error code.
func (c *clients) prepare(ctx context.Context, k callKey) (schema.Plan, string, string) {
	var p schema.Plan
	code, msg := c.request(ctx, "prepare", map[string]string{"session": k.Session, "call_id": k.CallID}, &p)
	if code == "" {
		if p.PlanID == "" {
			return p, "bad_answer", "an answer without a plan_id"
		}
		return p, codePlan, ""
	}
	return p, code, msg
}

// statusAwaiting asks jw.api.status (every session) and returns the calls
// it lists as awaiting review.
func (c *clients) statusAwaiting(ctx context.Context) (map[callKey]bool, error) {
	var st struct {
		AwaitingReview []schema.Assessment `json:"awaiting_review"`
	}
	for attempt := 0; ; attempt++ {
		code, msg := c.request(ctx, "status", map[string]string{}, &st)
		if code == "" {
			break
		}
		if attempt >= 20 || ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %s", code, msg)
		}
		time.Sleep(500 * time.Millisecond)
	}
	out := make(map[callKey]bool, len(st.AwaitingReview))
	for _, a := range st.AwaitingReview {
		out[callKey{a.Session, a.CallID}] = true
	}
	return out, nil
}

// charged reads the ledger (as admin) and returns the entry of a call, as
// a reviewer checks the business system before signing.
func (c *clients) charged(ctx context.Context, k callKey) (*chargeRecord, error) {
	msgs, err := readStream(ctx, c.adminJS, streamLedger)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		var ch chargeRecord
		if m.Header.Get(fence.HeaderMarker) != "" {
			continue // a raised fence, not a charge
		}
		if decodeJSON(m.Data, &ch) && ch.Session == k.Session && ch.CallID == k.CallID {
			ch.Seq, ch.Time = m.Seq, m.Time
			return &ch, nil
		}
	}
	return nil, nil
}

// review checks the ledger for a call's charge and publishes the verdict
// it supports, signed by the reviewer's key: completed with the entry as
// evidence, or not_executed.
//
// Before it reads the ledger it raises the ledger's fence for the session
// to the epoch of the session log's last event (at least the fence that
// closed the call, docs/protocol.md §9 "Before signing not_executed"): the
// call's writer, fenced but perhaps frozen and not dead, can no longer
// charge after the check, so a not_executed read from the ledger stays
// true.
func (c *clients) review(ctx context.Context, k callKey) (schema.Verdict, error) {
	if err := retry(ctx, 30*time.Second, func(ctx context.Context) error { return c.fenceLedger(ctx, k.Session) }); err != nil {
		return "", fmt.Errorf("raise the ledger's fence for %s: %w", k.Session, err)
	}
	ch, err := c.charged(ctx, k)
	if err != nil {
		return "", err
	}
	verdict, evidence := schema.VerdictNotExecuted, fmt.Sprintf("%s: no entry for call %s", streamLedger, k.CallID)
	if ch != nil {
		verdict, evidence = schema.VerdictCompleted, fmt.Sprintf("%s seq %d: %d cents to %s by call %s", streamLedger, ch.Seq, ch.AmountCents, ch.Account, k.CallID)
	}
	rv, err := recovery.SignReview(c.reviewerKey, schema.Review{V: schema.Version, Session: k.Session, CallID: k.CallID,
		Operator: "chaos-reviewer@ops", Evidence: evidence, Verdict: verdict, At: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(rv)
	err = retry(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := c.reviewerJS.Publish(ctx, subjectPrefix+".reviews."+k.Session, b)
		return err
	})
	return verdict, err
}

// fenceLedger raises the ledger fence of session (tools.ledger.<session>,
// package worker/fence) to the epoch of the last event on the session's
// log.
func (c *clients) fenceLedger(ctx context.Context, session string) error {
	ev, err := c.adminJS.Stream(ctx, streamEvents)
	if err != nil {
		return err
	}
	m, err := ev.GetLastMsgForSubject(ctx, subjectPrefix+".events."+session)
	if err != nil {
		return err
	}
	var last struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := json.Unmarshal(m.Data, &last); err != nil {
		return fmt.Errorf("last event of %s: %w", session, err)
	}
	fs, err := fence.New(ctx, fence.Config{JS: c.adminJS, Stream: streamLedger})
	if err != nil {
		return err
	}
	_, err = fs.Raise(ctx, ledgerSubject+"."+session, session, last.Epoch)
	return err
}

// retry runs op until it succeeds or d has passed (backoff 100 ms to 2 s),
// each attempt bounded by 5 s.
func retry(ctx context.Context, d time.Duration, op func(context.Context) error) error {
	deadline := time.Now().Add(d)
	wait := 100 * time.Millisecond
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(octx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
