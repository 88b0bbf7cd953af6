package recovery_test

import (
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

func review(v schema.Verdict) *schema.Review {
	return &schema.Review{V: 1, Session: testSession, CallID: "c-1", Operator: "alice@ops", Evidence: "ticket-431", Verdict: v, At: "2026-11-29T11:00:00Z"}
}

// TestPrepareRetryDecisionTable runs every row of the decision table under
// every effect with no review and with each verdict.
func TestPrepareRetryDecisionTable(t *testing.T) {
	verdicts := []schema.Verdict{"", schema.VerdictNotExecuted, schema.VerdictUncertain, schema.VerdictCompleted}
	for _, r := range decisionRows() {
		for _, eff := range allEffects {
			for _, v := range verdicts {
				name := r.name + "/" + eff.String() + "/review=" + string(v)
				if v == "" {
					name = r.name + "/" + eff.String() + "/no review"
				}
				t.Run(name, func(t *testing.T) {
					var rev *schema.Review
					if v != "" {
						rev = review(v)
					}
					decision := r.decision
					if decision == "" {
						decision = uncertainDecision[eff]
					}
					// what the design says, row by row
					var wantBasis schema.Basis
					var wantCode schema.Code
					switch {
					case v == schema.VerdictCompleted: // whatever the outcome
						wantCode = schema.CodeCompleted
					case r.outcome == schema.OutcomeCompleted:
						wantCode = schema.CodeCompleted
					case r.outcome == schema.OutcomeNotStarted:
						wantBasis = schema.BasisNotStarted
					case decision == schema.DecisionRetryAllowed:
						wantBasis = schema.BasisUncertainSafe
					case v == schema.VerdictNotExecuted:
						wantBasis = schema.BasisReviewedNotExecuted
					default: // no review, or uncertain: never lifts needs_review
						wantCode = schema.CodeNeedsReview
					}
					p, err := recovery.PrepareRetry(hist(r.events(eff)...), "c-1", rev)
					if wantCode != "" {
						if schema.CodeOf(err) != wantCode {
							t.Fatalf("got plan %+v, err %v; want %s", p, err, wantCode)
						}
						if !strings.Contains(err.Error(), `"c-1"`) {
							t.Errorf("message %q does not name the call", err)
						}
						return
					}
					if err != nil {
						t.Fatalf("want basis %s, got %v", wantBasis, err)
					}
					if p.Basis != wantBasis {
						t.Errorf("basis %s, want %s", p.Basis, wantBasis)
					}
					if wantBasis == schema.BasisReviewedNotExecuted {
						if p.Review == nil || *p.Review != *rev {
							t.Errorf("plan review %+v, want %+v", p.Review, rev)
						}
					} else if p.Review != nil {
						t.Errorf("plan carries review %+v for basis %s", p.Review, p.Basis)
					}
				})
			}
		}
	}
}

func TestPlanFields(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.FixedZone("x", 3600))
	evs := []schema.Event{
		callEv("c-1", effect.Idempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusFailed, ""),
		with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) {
			c.Arguments = json.RawMessage(`{ "qty": 2.0, "sku": "A-1", "id": 1234567890123456789 }`)
		}),
	}
	evs[0].Call.Arguments = json.RawMessage(`{"id":1234567890123456789,"sku":"A-1","qty":2}`)
	evs = append(evs, resultEv("c-2", schema.StatusTimeout, ""))
	p, err := recovery.PrepareRetry(hist(evs...), "c-2", nil, recovery.WithClock(func() time.Time { return at }))
	if err != nil {
		t.Fatal(err)
	}
	digest, err := schema.ArgsDigest(evs[3].Call.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	canon, _ := schema.Canonical(evs[3].Call.Arguments)
	want := schema.Plan{
		V: 1, PlanID: recovery.PlanID(testSession, "c-2"), Session: testSession, Task: "t-1", Tool: "orders.create",
		Arguments: canon, ArgsDigest: digest,
		Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}, Key: "op-1",
		PriorCallID: "c-2", PriorSeq: 4, Basis: schema.BasisUncertainSafe, IssuedAt: at.UTC(),
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("plan\n got %+v\nwant %+v", p, want)
	}
	if string(p.Arguments) != `{"id":1234567890123456789,"qty":2,"sku":"A-1"}` {
		t.Errorf("arguments %s are not canonical", p.Arguments)
	}
	if p.IssuedAt.Location() != time.UTC {
		t.Errorf("issued_at %v is not UTC", p.IssuedAt)
	}
	// the default clock
	before := time.Now().UTC()
	p, err = recovery.PrepareRetry(hist(evs...), "c-2", nil)
	if err != nil || p.IssuedAt.Before(before.Add(-time.Second)) || p.IssuedAt.Location() != time.UTC {
		t.Errorf("default clock: %v %v", p.IssuedAt, err)
	}
}

func TestPlanID(t *testing.T) {
	a := recovery.PlanID("s-1", "c-1")
	if a != recovery.PlanID("s-1", "c-1") {
		t.Fatal("PlanID is not deterministic")
	}
	if len(a) != 34 || !strings.HasPrefix(a, "p-") {
		t.Errorf("PlanID = %q, want p- and 32 hex digits", a)
	}
	for _, other := range [][2]string{{"s-1", "c-2"}, {"s-2", "c-1"}, {"s-1c", "-1"}, {"s-", "1c-1"}} {
		if recovery.PlanID(other[0], other[1]) == a {
			t.Errorf("PlanID%v collides with PlanID(s-1, c-1)", other)
		}
	}
}

// TestArgumentsExactNumbers: a retry whose 64-bit id differs beyond 2^53
// has other arguments (docs/protocol.md §5).
func TestArgumentsExactNumbers(t *testing.T) {
	evs := append(failed(), with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) {
		c.Arguments = json.RawMessage(`{"id":1234567890123456790}`)
	}))
	evs[0].Call.Arguments = json.RawMessage(`{"id":1234567890123456789}`)
	_, err := recovery.Inspect(hist(evs...), "c-2")
	checkErr(t, "Inspect", err, schema.CodeCorruptHistory, "different arguments")
}

func nonIdemHistory() schema.History {
	return hist(callEv("c-1", effect.NonIdempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusTimeout, ""))
}

func TestReviews(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	other, _ := nkeys.CreateUser()
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k nkeys.KeyPair, r *schema.Review) *schema.Review {
		s, err := recovery.SignReview(k, *r)
		if err != nil {
			t.Fatal(err)
		}
		return &s
	}
	mod := func(f func(r *schema.Review)) *schema.Review {
		r := review(schema.VerdictNotExecuted)
		f(r)
		return r
	}
	good := sign(kp, review(schema.VerdictNotExecuted))
	tampered := *good
	tampered.Evidence = "ticket-432"
	badSig := *good
	badSig.Sig = good.Sig[:len(good.Sig)-4] + "AAAA"
	notB64 := *good
	notB64.Sig = "!!!"
	wrongSigner := *good
	wrongSigner.Signer, _ = other.PublicKey()
	acct, _ := nkeys.CreateAccount()
	acctPub, _ := acct.PublicKey()
	acctSigner := *good
	acctSigner.Signer = acctPub

	signed := recovery.RequireSignedReview(trusted)
	tests := []struct {
		name   string
		review *schema.Review
		opts   []recovery.Option
		code   schema.Code // "" = plan with basis reviewed_not_executed
		is     error
	}{
		{"unsigned offline", review(schema.VerdictNotExecuted), nil, "", nil},
		{"signed by trusted key", good, []recovery.Option{signed}, "", nil},
		{"signed, completed", sign(kp, review(schema.VerdictCompleted)), []recovery.Option{signed}, schema.CodeCompleted, nil},
		{"signed, uncertain", sign(kp, review(schema.VerdictUncertain)), []recovery.Option{signed}, schema.CodeNeedsReview, nil},
		{"unsigned when required", review(schema.VerdictNotExecuted), []recovery.Option{signed}, schema.CodeInvalidReview, recovery.ErrUnsignedReview},
		{"signed by unknown key", sign(other, review(schema.VerdictNotExecuted)), []recovery.Option{signed}, schema.CodeInvalidReview, recovery.ErrUntrustedSigner},
		{"no trusted keys", good, []recovery.Option{recovery.RequireSignedReview(nil)}, schema.CodeInvalidReview, recovery.ErrUntrustedSigner},
		{"tampered after signing", &tampered, []recovery.Option{signed}, schema.CodeInvalidReview, recovery.ErrBadSignature},
		{"bad sig", &badSig, []recovery.Option{signed}, schema.CodeInvalidReview, recovery.ErrBadSignature},
		{"sig not base64url", &notB64, []recovery.Option{signed}, schema.CodeInvalidReview, nil},
		{"signer swapped", &wrongSigner, []recovery.Option{recovery.RequireSignedReview(mustTrust(t, pub, wrongSigner.Signer))}, schema.CodeInvalidReview, recovery.ErrBadSignature},
		{"account key signer", &acctSigner, []recovery.Option{signed}, schema.CodeInvalidReview, nil},
		{"other session", sign(kp, mod(func(r *schema.Review) { r.Session = "s-2" })), []recovery.Option{signed}, schema.CodeInvalidReview, nil},
		{"other call", sign(kp, mod(func(r *schema.Review) { r.CallID = "c-2" })), []recovery.Option{signed}, schema.CodeInvalidReview, nil},
		{"empty operator", sign(kp, mod(func(r *schema.Review) { r.Operator = "" })), []recovery.Option{signed}, schema.CodeInvalidReview, nil},
		{"blank operator", mod(func(r *schema.Review) { r.Operator = "  " }), nil, schema.CodeInvalidReview, nil},
		{"unknown verdict", sign(kp, mod(func(r *schema.Review) { r.Verdict = "probably_fine" })), []recovery.Option{signed}, schema.CodeInvalidReview, nil},
		{"empty verdict", mod(func(r *schema.Review) { r.Verdict = "" }), nil, schema.CodeInvalidReview, nil},
		{"wrong version", mod(func(r *schema.Review) { r.V = 2 }), nil, schema.CodeInvalidReview, nil},
		{"other call offline", mod(func(r *schema.Review) { r.CallID = "c-2" }), nil, schema.CodeInvalidReview, nil},
	}
	// VerifyReview on its own names these two, which PrepareRetry's form
	// check (schema.Review.Validate) catches first
	if err := recovery.VerifyReview(notB64, trusted); !errors.Is(err, recovery.ErrBadSignature) || schema.CodeOf(err) != schema.CodeInvalidReview {
		t.Errorf("VerifyReview(sig not base64url) = %v", err)
	}
	if err := recovery.VerifyReview(acctSigner, trusted); !errors.Is(err, recovery.ErrNotUserKey) || schema.CodeOf(err) != schema.CodeInvalidReview {
		t.Errorf("VerifyReview(account key signer) = %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := recovery.PrepareRetry(nonIdemHistory(), "c-1", tc.review, tc.opts...)
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				if p.Basis != schema.BasisReviewedNotExecuted || p.Review == nil || *p.Review != *tc.review {
					t.Errorf("plan %+v", p)
				}
				return
			}
			if schema.CodeOf(err) != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v, %v) is false", err, tc.is)
			}
		})
	}
}

func mustTrust(t *testing.T, keys ...string) recovery.TrustedKeys {
	t.Helper()
	tk, err := recovery.NewTrustedKeys(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestVerifyReviewRoundTrip(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	r, err := recovery.SignReview(kp, *review(schema.VerdictNotExecuted))
	if err != nil {
		t.Fatal(err)
	}
	if r.Signer != pub || strings.ContainsAny(r.Sig, "+/=") || r.Sig == "" {
		t.Errorf("signer %q sig %q: want the public key and unpadded base64url", r.Signer, r.Sig)
	}
	// through the wire: encode, decode, verify
	b, _ := json.Marshal(r)
	d, err := recovery.DecodeReview(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := recovery.VerifyReview(d, mustTrust(t, pub)); err != nil {
		t.Errorf("VerifyReview after a JSON round trip: %v", err)
	}
	// any field change breaks it, including the signer-independent ones
	for _, f := range []func(*schema.Review){
		func(r *schema.Review) { r.V = 2 },
		func(r *schema.Review) { r.Session = "s-2" },
		func(r *schema.Review) { r.CallID = "c-2" },
		func(r *schema.Review) { r.Operator = "mallory" },
		func(r *schema.Review) { r.Verdict = schema.VerdictCompleted },
		func(r *schema.Review) { r.At = "2026-11-30T00:00:00Z" },
	} {
		c := d
		f(&c)
		if err := recovery.VerifyReview(c, mustTrust(t, pub)); !errors.Is(err, recovery.ErrBadSignature) {
			t.Errorf("changed review %+v verified: %v", c, err)
		}
	}
	acct, _ := nkeys.CreateAccount()
	if _, err := recovery.SignReview(acct, r); !errors.Is(err, recovery.ErrNotUserKey) {
		t.Errorf("SignReview with an account key: %v", err)
	}
}

func TestDecodeReview(t *testing.T) {
	good := `{"v":1,"session":"s-1","call_id":"c-1","operator":"alice@ops","evidence":"t","verdict":"not_executed","extra":{"ignored":true}}`
	if r, err := recovery.DecodeReview([]byte(good)); err != nil || r.Verdict != schema.VerdictNotExecuted {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{
		``, `null`, `[]`, `{"v":1,`, `"review"`,
		`{"v":1,"verdict":"completed","verdict":"not_executed"}`,
		`{"v":"1"}`,
		`{"v":1,"operator":"\ud800"}`,
	} {
		if _, err := recovery.DecodeReview([]byte(bad)); schema.CodeOf(err) != schema.CodeInvalidReview {
			t.Errorf("DecodeReview(%s) = %v, want invalid_review", bad, err)
		}
	}
}

func TestTrustedKeys(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	tk, err := recovery.ParseTrustedKeys([]byte("# reviewers\n\n  " + pub + "  \n"))
	if err != nil || !tk.Has(pub) || len(tk) != 1 {
		t.Fatalf("%v %v", tk, err)
	}
	acct, _ := nkeys.CreateAccount()
	apub, _ := acct.PublicKey()
	if _, err := recovery.ParseTrustedKeys([]byte(pub + "\n" + apub + "\n")); !errors.Is(err, recovery.ErrNotUserKey) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("account key: %v", err)
	}
	// Several keys on a line, separated by white space (what an
	// environment variable holding a list expands to).
	kp2, _ := nkeys.CreateUser()
	pub2, _ := kp2.PublicKey()
	if tk, err := recovery.ParseTrustedKeys([]byte(pub + " \t" + pub2 + "\n")); err != nil || !tk.Has(pub) || !tk.Has(pub2) || len(tk) != 2 {
		t.Errorf("two keys on a line: %v %v", tk, err)
	}
	if _, err := recovery.ParseTrustedKeys([]byte(pub + " " + apub + "\n")); !errors.Is(err, recovery.ErrNotUserKey) || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("account key beside a user key: %v", err)
	}
	if _, err := recovery.NewTrustedKeys("nope"); !errors.Is(err, recovery.ErrNotUserKey) {
		t.Errorf("NewTrustedKeys(nope): %v", err)
	}
	var none recovery.TrustedKeys
	if none.Has(pub) {
		t.Error("nil TrustedKeys trusts a key")
	}
}
