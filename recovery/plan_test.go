package recovery_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// keys are the parties of the signed-plan tests: a planner (the recovery
// worker), a reviewer, and an outsider whose key nobody trusts.
type keys struct {
	planner, reviewer, outsider nkeys.KeyPair
	planners, reviewers         recovery.TrustedKeys
}

func newKeys(t *testing.T) keys {
	t.Helper()
	var k keys
	for _, p := range []*nkeys.KeyPair{&k.planner, &k.reviewer, &k.outsider} {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		*p = kp
	}
	k.planners = mustTrust(t, pub(t, k.planner))
	k.reviewers = mustTrust(t, pub(t, k.reviewer))
	return k
}

func pub(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func signPlan(t testing.TB, kp nkeys.KeyPair, p schema.Plan) schema.Plan {
	t.Helper()
	s, err := recovery.SignPlan(kp, p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func signReview(t testing.TB, kp nkeys.KeyPair, r schema.Review) *schema.Review {
	t.Helper()
	s, err := recovery.SignReview(kp, r)
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

// planClock is the clock of the plans in these tests: not a whole second,
// and not UTC.
func planClock() time.Time {
	return time.Date(2026, 11, 29, 12, 0, 7, 123456789, time.FixedZone("x", 3600))
}

// plan prepares (with a review when given) and signs the retry of callID
// in evs.
func plan(t testing.TB, kp nkeys.KeyPair, evs []schema.Event, callID string, rv *schema.Review) schema.Plan {
	t.Helper()
	p, err := recovery.PrepareRetry(hist(evs...), callID, rv, recovery.WithClock(planClock))
	if err != nil {
		t.Fatal(err)
	}
	return signPlan(t, kp, p)
}

// runtimeRetry is the tool.call the runtime appends when it runs plan p
// as call id with the caller's argument bytes (nil: the plan's): the
// operation and its retry link come from the plan.
func runtimeRetry(p schema.Plan, id string, args json.RawMessage) schema.Event {
	if args == nil {
		args = p.Arguments
	}
	return schema.Event{V: 1, Session: p.Session, Epoch: 1, At: testAt, Type: schema.TypeCall, Call: &schema.Call{
		CallID: id, Tool: p.Tool, Arguments: args, StartMarker: true,
		Operation: &schema.Operation{Task: p.Task, Key: p.Key, Contract: p.Contract, Retry: &schema.RetryLink{
			PriorCallID: p.PriorCallID, PriorSeq: p.PriorSeq, PlanID: p.PlanID, Basis: p.Basis, Review: p.Review,
			IssuedAt: p.IssuedAt, Signer: p.Signer, Sig: p.Sig,
		}},
	}}
}

// samplePlan is a plan with every member set, a review among them.
func samplePlan(t testing.TB, k keys) schema.Plan {
	rv := signReview(t, k.reviewer, schema.Review{V: 1, Session: testSession, CallID: "c-1", Operator: "alice@ops", Evidence: "ticket-431", Verdict: schema.VerdictNotExecuted, At: "2026-11-29T11:00:00Z"})
	return schema.Plan{
		V: 1, PlanID: recovery.PlanID(testSession, "c-1"), Session: testSession, Task: "t-1", Tool: "payments.charge",
		Arguments: json.RawMessage(`{"amount":1200,"card":"tok_1","id":1234567890123456789}`), ArgsDigest: "sha256:00",
		Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: "pay-v1"}, Key: "op-7",
		PriorCallID: "c-1", PriorSeq: 3, Basis: schema.BasisReviewedNotExecuted, Review: rv,
		IssuedAt: time.Date(2026, 11, 29, 12, 0, 7, 0, time.UTC),
	}
}

// checkUnauthorized checks that err is unauthorized_retry wrapping is and
// naming every part of msg.
func checkUnauthorized(t *testing.T, what string, err error, is error, msg ...string) {
	t.Helper()
	if schema.CodeOf(err) != schema.CodeUnauthorizedRetry || !errors.Is(err, schema.ErrUnauthorizedRetry) {
		t.Fatalf("%s: got %v, want unauthorized_retry", what, err)
	}
	if is != nil && !errors.Is(err, is) {
		t.Errorf("%s: errors.Is(%v, %v) is false", what, err, is)
	}
	if errors.Is(err, schema.ErrInvalidReview) {
		t.Errorf("%s: %v also matches invalid_review", what, err)
	}
	for _, m := range msg {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: message %q does not mention %q", what, err, m)
		}
	}
}

// TestSignPlanPayload pins what a plan signature covers, for signers and
// verifiers in other languages: the RFC 8785 form of exactly the members
// SignPlan documents, sig left out, issued_at at whole seconds with Z.
func TestSignPlanPayload(t *testing.T) {
	k := newKeys(t)
	p := signPlan(t, k.planner, samplePlan(t, k))
	if p.Signer != pub(t, k.planner) || p.Sig == "" || strings.ContainsAny(p.Sig, "+/=") {
		t.Fatalf("signer %q sig %q: want the planner's public key and unpadded base64url", p.Signer, p.Sig)
	}
	rv := p.Review
	// written by hand, members sorted as RFC 8785 sorts them
	want := `{"args_digest":"sha256:00","arguments":{"amount":1200,"card":"tok_1","id":1234567890123456789},` +
		`"basis":"reviewed_not_executed","contract":{"effect":"non_idempotent","revision":"pay-v1"},` +
		`"issued_at":"2026-11-29T12:00:07Z","key":"op-7","plan_id":"` + p.PlanID + `","prior_call_id":"c-1","prior_seq":3,` +
		`"review":{"at":"2026-11-29T11:00:00Z","call_id":"c-1","evidence":"ticket-431","operator":"alice@ops","session":"s-1","sig":"` + rv.Sig + `","signer":"` + rv.Signer + `","v":1,"verdict":"not_executed"},` +
		`"session":"s-1","signer":"` + p.Signer + `","task":"t-1","tool":"payments.charge","v":1}`
	sig, err := base64.RawURLEncoding.DecodeString(p.Sig)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := nkeys.FromPublicKey(p.Signer)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifier.Verify([]byte(want), sig); err != nil {
		t.Errorf("the signature does not cover\n%s", want)
	}
	// without a review, review is null (and still signed)
	p = samplePlan(t, k)
	p.Review, p.Basis = nil, schema.BasisUncertainSafe
	p = signPlan(t, k.planner, p)
	sig, _ = base64.RawURLEncoding.DecodeString(p.Sig)
	want = `{"args_digest":"sha256:00","arguments":{"amount":1200,"card":"tok_1","id":1234567890123456789},` +
		`"basis":"uncertain_safe","contract":{"effect":"non_idempotent","revision":"pay-v1"},` +
		`"issued_at":"2026-11-29T12:00:07Z","key":"op-7","plan_id":"` + p.PlanID + `","prior_call_id":"c-1","prior_seq":3,` +
		`"review":null,"session":"s-1","signer":"` + p.Signer + `","task":"t-1","tool":"payments.charge","v":1}`
	if err := verifier.Verify([]byte(want), sig); err != nil {
		t.Errorf("the signature does not cover\n%s", want)
	}
}

func TestVerifyPlan(t *testing.T) {
	k := newKeys(t)
	good := signPlan(t, k.planner, samplePlan(t, k))
	if err := recovery.VerifyPlan(good, k.planners); err != nil {
		t.Fatalf("VerifyPlan: %v", err)
	}
	// through the wire: encode, decode, verify
	b, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	var wire schema.Plan
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	if err := recovery.VerifyPlan(wire, k.planners); err != nil {
		t.Errorf("VerifyPlan after a JSON round trip: %v", err)
	}
	// arguments that differ only in spacing and member order are the same
	// canonical arguments
	reformatted := good
	reformatted.Arguments = json.RawMessage(`{ "id": 1234567890123456789, "card": "tok_1", "amount": 1200 }`)
	if err := recovery.VerifyPlan(reformatted, k.planners); err != nil {
		t.Errorf("reformatted arguments: %v", err)
	}

	mod := func(f func(p *schema.Plan)) schema.Plan {
		p := good
		if good.Review != nil {
			r := *good.Review
			p.Review = &r
		}
		f(&p)
		return p
	}
	reviewSig := signReview(t, k.planner, *good.Review) // the planner key signs a review: its sig is not a plan's
	acct, _ := nkeys.CreateAccount()
	tests := []struct {
		name    string
		plan    schema.Plan
		trusted recovery.TrustedKeys
		is      error
	}{
		{"unsigned", mod(func(p *schema.Plan) { p.Signer, p.Sig = "", "" }), k.planners, recovery.ErrUnsignedPlan},
		{"no sig", mod(func(p *schema.Plan) { p.Sig = "" }), k.planners, recovery.ErrUnsignedPlan},
		{"no signer", mod(func(p *schema.Plan) { p.Signer = "" }), k.planners, recovery.ErrUnsignedPlan},
		{"untrusted signer", signPlan(t, k.outsider, samplePlan(t, k)), k.planners, recovery.ErrUntrustedSigner},
		{"a reviewer's key is no planner's", signPlan(t, k.reviewer, samplePlan(t, k)), k.planners, recovery.ErrUntrustedSigner},
		{"nil trusted keys", good, nil, recovery.ErrUntrustedSigner},
		{"empty trusted keys", good, recovery.TrustedKeys{}, recovery.ErrUntrustedSigner},
		{"signer swapped", mod(func(p *schema.Plan) { p.Signer = pub(t, k.outsider) }), mustTrust(t, pub(t, k.planner), pub(t, k.outsider)), recovery.ErrBadSignature},
		{"account key signer", mod(func(p *schema.Plan) { p.Signer = pub(t, acct) }), mustTrust(t, pub(t, k.planner)), recovery.ErrNotUserKey},
		{"sig not base64url", mod(func(p *schema.Plan) { p.Sig = "!!!" }), k.planners, recovery.ErrBadSignature},
		{"sig padded", mod(func(p *schema.Plan) { p.Sig += "==" }), k.planners, recovery.ErrBadSignature},
		{"sig truncated", mod(func(p *schema.Plan) { p.Sig = p.Sig[:len(p.Sig)-4] }), k.planners, recovery.ErrBadSignature},
		{"a review's sig", mod(func(p *schema.Plan) { p.Sig = reviewSig.Sig }), k.planners, recovery.ErrBadSignature},
		{"arguments uncanonicalizable", mod(func(p *schema.Plan) { p.Arguments = json.RawMessage(`{"a":1,"a":2}`) }), k.planners, recovery.ErrBadSignature},
	}
	// any member changed after signing breaks the signature
	for name, f := range map[string]func(*schema.Plan){
		"v":       func(p *schema.Plan) { p.V = 2 },
		"plan_id": func(p *schema.Plan) { p.PlanID = recovery.PlanID(testSession, "c-9") },
		"session": func(p *schema.Plan) { p.Session = "s-2" },
		"task":    func(p *schema.Plan) { p.Task = "t-2" },
		"tool":    func(p *schema.Plan) { p.Tool = "payments.refund" },
		"arguments": func(p *schema.Plan) {
			p.Arguments = json.RawMessage(`{"amount":1201,"card":"tok_1","id":1234567890123456789}`)
		},
		"arguments beyond 2^53": func(p *schema.Plan) {
			p.Arguments = json.RawMessage(`{"amount":1200,"card":"tok_1","id":1234567890123456790}`)
		},
		"args_digest":       func(p *schema.Plan) { p.ArgsDigest = "sha256:01" },
		"contract effect":   func(p *schema.Plan) { p.Contract.Effect = effect.Idempotent },
		"contract revision": func(p *schema.Plan) { p.Contract.Revision = "pay-v2" },
		"key":               func(p *schema.Plan) { p.Key = "op-8" },
		"prior_call_id":     func(p *schema.Plan) { p.PriorCallID = "c-2" },
		"prior_seq":         func(p *schema.Plan) { p.PriorSeq = 4 },
		"basis":             func(p *schema.Plan) { p.Basis = schema.BasisNotStarted },
		"review dropped":    func(p *schema.Plan) { p.Review = nil },
		"review verdict":    func(p *schema.Plan) { p.Review.Verdict = schema.VerdictUncertain },
		"review sig":        func(p *schema.Plan) { p.Review.Sig = reviewSig.Sig },
		"issued_at +1s":     func(p *schema.Plan) { p.IssuedAt = p.IssuedAt.Add(time.Second) },
		"issued_at +1ns":    func(p *schema.Plan) { p.IssuedAt = p.IssuedAt.Add(time.Nanosecond) },
		"issued_at zone":    func(p *schema.Plan) { p.IssuedAt = p.IssuedAt.In(time.FixedZone("y", 7200)) },
	} {
		tests = append(tests, struct {
			name    string
			plan    schema.Plan
			trusted recovery.TrustedKeys
			is      error
		}{"changed " + name, mod(f), k.planners, recovery.ErrBadSignature})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkUnauthorized(t, "VerifyPlan", recovery.VerifyPlan(tc.plan, tc.trusted), tc.is)
		})
	}
	if _, err := recovery.SignPlan(acct, good); !errors.Is(err, recovery.ErrNotUserKey) {
		t.Errorf("SignPlan with an account key: %v", err)
	}
}

// TestPrepareRetryIssuedAt: plans are issued at whole seconds in UTC, so
// issued_at has one text form.
func TestPrepareRetryIssuedAt(t *testing.T) {
	evs := []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusFailed, "")}
	p, err := recovery.PrepareRetry(hist(evs...), "c-1", nil, recovery.WithClock(planClock))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 29, 11, 0, 7, 0, time.UTC); !p.IssuedAt.Equal(want) || p.IssuedAt.Location() != time.UTC {
		t.Errorf("issued_at %v, want %v", p.IssuedAt, want)
	}
	b, _ := json.Marshal(p)
	if !strings.Contains(string(b), `"issued_at":"2026-11-29T11:00:07Z"`) {
		t.Errorf("plan JSON %s", b)
	}
	// the default clock too
	p, err = recovery.PrepareRetry(hist(evs...), "c-1", nil)
	if err != nil || p.IssuedAt.Nanosecond() != 0 || p.IssuedAt.Location() != time.UTC {
		t.Errorf("default clock: %v %v", p.IssuedAt, err)
	}
}

// TestPlanOf: the plan rebuilt from the retry the runtime recorded is the
// signed plan, so it verifies again from the history, in memory and read
// back from JSON Lines, whatever bytes the caller passed as arguments.
func TestPlanOf(t *testing.T) {
	k := newKeys(t)
	evs := []schema.Event{callEv("c-1", effect.NonIdempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusTimeout, "")}
	rv := signReview(t, k.reviewer, *review(schema.VerdictNotExecuted))
	for _, tc := range []struct {
		name string
		rv   *schema.Review
		args json.RawMessage
	}{
		{"reviewed, plan's arguments", rv, nil},
		{"reviewed, caller's bytes", rv, json.RawMessage(`{ "qty": 2.0, "sku": "A-1" }`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plan(t, k.planner, evs, "c-1", tc.rv)
			ev := runtimeRetry(p, "c-2", tc.args)
			ev.Seq = 4
			got, err := recovery.PlanOf(ev)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, p) {
				t.Errorf("PlanOf\n got %+v\nwant %+v", got, p)
			}
			if err := recovery.VerifyPlan(got, k.planners); err != nil {
				t.Errorf("VerifyPlan(PlanOf): %v", err)
			}
			// read back from an exported history
			var read []schema.Event
			for e, err := range reader(jsonl(t, append(evs, ev)...)) {
				if err != nil {
					t.Fatal(err)
				}
				read = append(read, e)
			}
			got, err = recovery.PlanOf(read[3])
			if err != nil {
				t.Fatal(err)
			}
			if err := recovery.VerifyPlan(got, k.planners); err != nil {
				t.Errorf("VerifyPlan(PlanOf) from JSON Lines: %v", err)
			}
		})
	}
	// not a retry
	legacy := with(callEv("c-1", effect.Unknown, true), func(c *schema.Call) { c.Operation = nil })
	for _, ev := range []schema.Event{evs[0], evs[1], evs[2], fencedEv(), legacy, {V: 1, Type: schema.TypeCall}, {}} {
		if _, err := recovery.PlanOf(ev); !errors.Is(err, recovery.ErrNotRetry) {
			t.Errorf("PlanOf(%s event) = %v, want ErrNotRetry", ev.Type, err)
		}
	}
	bad := with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) { c.Arguments = json.RawMessage(`{"a":1,"a":2}`) })
	if _, err := recovery.PlanOf(bad); schema.CodeOf(err) != schema.CodeCorruptHistory {
		t.Errorf("PlanOf(duplicate member names) = %v, want corrupt_history", err)
	}
}
