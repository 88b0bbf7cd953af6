package schema_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

const okPlan = `{"v":1,"plan_id":"p-1","session":"s-1","task":"t-1","tool":"orders.create","arguments":{"sku":"A","qty":1},` +
	`"args_digest":"sha256:` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `",` +
	`"contract":{"effect":"idempotent","revision":"orders-v1"},"key":"op-1","prior_call_id":"c-1","prior_seq":0,` +
	`"basis":"uncertain_safe","review":null,"issued_at":"2026-11-29T10:00:00Z"}`

const okReview = `{"v":1,"session":"s-1","call_id":"c-1","operator":"a","evidence":"e","verdict":"not_executed"}`

// TestDecodePlan checks DecodePlan case by case, and that it agrees with
// plan.schema.json on every case a JSON Schema can judge.
func TestDecodePlan(t *testing.T) {
	signed := strings.TrimSuffix(okPlan, "}") + `,"signer":"` + testSigner + `","sig":"c2lnbmF0dXJl"}`
	reviewed := strings.Replace(strings.Replace(okPlan, `"uncertain_safe"`, `"reviewed_not_executed"`, 1), `"review":null`, `"review":`+okReview, 1)
	long := strings.Repeat("k", schema.MaxFieldBytes+1)
	tests := []struct {
		name, doc  string
		valid      bool
		tooLong    bool
		schemaSees bool
	}{
		{"valid", okPlan, true, false, true},
		{"valid signed", signed, true, false, true},
		{"valid reviewed", reviewed, true, false, true},
		{"unknown member", strings.TrimSuffix(okPlan, "}") + `,"note":"x"}`, true, false, true},
		{"contract without effect", strings.Replace(okPlan, `"effect":"idempotent",`, "", 1), true, false, true},
		{"missing prior_seq", strings.Replace(okPlan, `"prior_seq":0,`, "", 1), false, false, true},
		{"missing review", strings.Replace(okPlan, `"review":null,`, "", 1), false, false, true},
		{"missing issued_at", strings.Replace(okPlan, `,"issued_at":"2026-11-29T10:00:00Z"`, "", 1), false, false, true},
		{"missing contract", strings.Replace(okPlan, `"contract":{"effect":"idempotent","revision":"orders-v1"},`, "", 1), false, false, true},
		{"bad digest", strings.Replace(okPlan, `"sha256:0123`, `"sha256:X123`, 1), false, false, true},
		{"bad basis", strings.Replace(okPlan, `"uncertain_safe"`, `"hope"`, 1), false, false, true},
		{"reviewed without review", strings.Replace(okPlan, `"uncertain_safe"`, `"reviewed_not_executed"`, 1), false, false, true},
		{"bad review", strings.Replace(reviewed, `"not_executed"}`, `"maybe"}`, 1), false, false, true},
		{"review without evidence", strings.Replace(reviewed, `"evidence":"e",`, "", 1), false, false, true},
		{"signer without sig", strings.TrimSuffix(okPlan, "}") + `,"signer":"` + testSigner + `"}`, false, false, true},
		{"sig without signer", strings.TrimSuffix(okPlan, "}") + `,"sig":"c2ln"}`, false, false, true},
		{"bad signer", strings.Replace(signed, `"UDXU4`, `"NDXU4`, 1), false, false, true},
		{"padded sig", strings.Replace(signed, `"c2lnbmF0dXJl"`, `"c2lnbg=="`, 1), false, false, true},
		{"bad session", strings.Replace(okPlan, `"s-1"`, `"s 1"`, 1), false, false, true},
		{"key too long", strings.Replace(okPlan, `"op-1"`, `"`+long+`"`, 1), false, true, true},
		{"effect null", strings.Replace(okPlan, `"idempotent"`, `null`, 1), false, false, true},
		{"duplicate in arguments", strings.Replace(okPlan, `"qty":1`, `"qty":1,"sku":"B"`, 1), false, false, false},
		{"duplicate top-level", strings.TrimSuffix(okPlan, "}") + `,"plan_id":"p-2"}`, false, false, false},
		{"case variant", strings.TrimSuffix(okPlan, "}") + `,"Plan_ID":"p-2"}`, false, false, false},
		{"case variant in contract", strings.Replace(okPlan, `"revision":"orders-v1"`, `"revision":"orders-v1","Effect":"read_only"`, 1), false, false, false},
		{"huge number", strings.Replace(okPlan, `"qty":1`, `"qty":1e20000`, 1), false, false, false},
		{"not an object", `[1]`, false, false, false},
		{"bad json", okPlan[:40], false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := schema.DecodePlan([]byte(tt.doc))
			if tt.valid != (err == nil) {
				t.Fatalf("DecodePlan = %+v, %v; want valid %v", p, err, tt.valid)
			}
			if err != nil && !errors.Is(err, schema.ErrInvalidPlan) {
				t.Errorf("error %v does not match ErrInvalidPlan", err)
			}
			if tt.tooLong != errors.Is(err, schema.ErrFieldTooLong) {
				t.Errorf("error %v: field_too_long %v, want %v", err, !tt.tooLong, tt.tooLong)
			}
			if tt.schemaSees {
				if serr := validate(t, "plan", []byte(tt.doc)); (serr == nil) != (err == nil) {
					t.Errorf("Go says %v, plan.schema.json says %v", err, serr)
				}
			}
		})
	}
	p, err := schema.DecodePlan([]byte(reviewed))
	if err != nil || p.Review == nil || p.Review.Operator != "a" || p.PriorSeq != 0 || string(p.Arguments) != `{"sku":"A","qty":1}` ||
		p.Contract != (effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}) || !p.IssuedAt.Equal(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("DecodePlan = %+v, %v", p, err)
	}
	// What Go encodes, Go decodes, to the same plan.
	b, _ := json.Marshal(p)
	back, err := schema.DecodePlan(b)
	if err != nil {
		t.Fatalf("re-decoding %s: %v", b, err)
	}
	again, _ := json.Marshal(back)
	if string(again) != string(b) {
		t.Errorf("plan changed through encode/decode:\n%s\n%s", b, again)
	}
}

const okAssessment = `{"session":"s-1","call_id":"c-2","tool":"orders.create","task":"t-1","key":"op-1","contract":{"effect":"idempotent","revision":"orders-v1"},"outcome":"uncertain","evidence":"failed","decision":"retry_allowed","attempts":2,"chain":["c-1","c-2"]}`

func TestDecodeAssessment(t *testing.T) {
	tests := []struct {
		name, doc  string
		valid      bool
		schemaSees bool
	}{
		{"valid", okAssessment, true, true},
		{"unknown member", strings.TrimSuffix(okAssessment, "}") + `,"note":1}`, true, true},
		{"bad outcome", strings.Replace(okAssessment, `"uncertain"`, `"done"`, 1), false, true},
		{"bad decision", strings.Replace(okAssessment, `"retry_allowed"`, `"maybe"`, 1), false, true},
		{"no attempts", strings.Replace(okAssessment, `"attempts":2,`, "", 1), false, true},
		{"empty chain", strings.Replace(okAssessment, `["c-1","c-2"]`, `[]`, 1), false, true},
		{"null chain", strings.Replace(okAssessment, `["c-1","c-2"]`, `null`, 1), false, true},
		{"empty evidence", strings.Replace(okAssessment, `"failed"`, `""`, 1), false, true},
		{"bad session", strings.Replace(okAssessment, `"s-1"`, `"s.1"`, 1), false, true},
		{"missing contract", strings.Replace(okAssessment, `"contract":{"effect":"idempotent","revision":"orders-v1"},`, "", 1), false, true},
		{"duplicate", strings.TrimSuffix(okAssessment, "}") + `,"outcome":"completed"}`, false, false},
		{"case variant", strings.TrimSuffix(okAssessment, "}") + `,"Outcome":"completed"}`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := schema.DecodeAssessment([]byte(tt.doc))
			if tt.valid != (err == nil) {
				t.Fatalf("DecodeAssessment = %+v, %v; want valid %v", a, err, tt.valid)
			}
			if err != nil && !errors.Is(err, schema.ErrInvalidAssessment) {
				t.Errorf("error %v does not match ErrInvalidAssessment", err)
			}
			if tt.schemaSees {
				if serr := validate(t, "assessment", []byte(tt.doc)); (serr == nil) != (err == nil) {
					t.Errorf("Go says %v, assessment.schema.json says %v", err, serr)
				}
			}
		})
	}
	a, err := schema.DecodeAssessment([]byte(okAssessment))
	if err != nil {
		t.Fatal(err)
	}
	b, err := schema.EncodeAssessment(&a)
	if err != nil || string(b) != okAssessment {
		t.Errorf("EncodeAssessment(DecodeAssessment(x)) = %s, %v; want x", b, err)
	}
}

// TestEncodeAssessmentIsMarshal checks EncodeAssessment against
// encoding/json's Marshal byte for byte, on every character class Marshal
// escapes.
func TestEncodeAssessmentIsMarshal(t *testing.T) {
	for _, a := range []schema.Assessment{
		{Session: "s-1", CallID: "c-1", Tool: "orders.create", Task: "t", Key: "k", Contract: effect.Contract{Effect: effect.Idempotent, Revision: "v1"},
			Outcome: schema.OutcomeUncertain, Evidence: "failed", Decision: schema.DecisionRetryAllowed, Attempts: 1, Chain: []string{"c-1"}},
		{Session: "s", CallID: "c\"\\\n\r\t\b\f\x01\x1f\x7f<é>&", Tool: "\u2028\u2029", Key: "bad\xffutf8\xe2\x80", Task: "\U0001F602",
			Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: "</script>"}, Attempts: -3, Chain: []string{"a", "b\x00", "\xc0"}},
		{Chain: []string{}},
		{},
	} {
		want, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		got, err := schema.EncodeAssessment(&a)
		if err != nil || string(got) != string(want) {
			t.Errorf("EncodeAssessment = %s, %v\n  json.Marshal %s", got, err, want)
		}
		buf := []byte("prefix")
		got, err = schema.AppendAssessment(buf, &a)
		if err != nil || string(got) != "prefix"+string(want) {
			t.Errorf("AppendAssessment = %s, %v", got, err)
		}
	}
	bad := schema.Assessment{Contract: effect.Contract{Effect: effect.Effect(9)}}
	if _, err := json.Marshal(bad); err == nil {
		t.Fatal("json.Marshal accepts an out-of-range effect")
	}
	if got, err := schema.AppendAssessment([]byte("x"), &bad); !errors.Is(err, effect.ErrUnknownEffect) || string(got) != "x" {
		t.Errorf("AppendAssessment with effect 9 = %q, %v", got, err)
	}
}

func TestUnmarshal(t *testing.T) {
	type body struct {
		Session string          `json:"session"`
		N       int             `json:"n"`
		Args    json.RawMessage `json:"args"`
	}
	var b body
	if err := schema.Unmarshal([]byte(` {"session":"s-1","n":2,"args":{"a":[1,{"b":null}]},"x":1} `), &b); err != nil || b.Session != "s-1" || b.N != 2 || string(b.Args) != `{"a":[1,{"b":null}]}` {
		t.Fatalf("Unmarshal = %+v, %v", b, err)
	}
	for _, in := range []string{
		`{"session":"a","session":"b"}`,
		`{"args":{"a":1,"a":2}}`,
		`{"args":{"k":[{"x":1,"\u0078":2}]}}`,
		"{\"session\":\"\xff\"}",
		`{"session":"\ud800"}`,
		`{"n":"2"}`,
		`{"args":[1e99999]}`,
		`{} {}`,
		``,
		`{"session":`,
	} {
		var b body
		if err := schema.Unmarshal([]byte(in), &b); !errors.Is(err, schema.ErrInvalidJSON) {
			t.Errorf("Unmarshal(%q) = %v, want ErrInvalidJSON", in, err)
		}
	}
	// Names match case-sensitively: a case variant is an unknown member.
	b = body{}
	if err := schema.Unmarshal([]byte(`{"Session":"x"}`), &b); err != nil || b.Session != "" {
		t.Errorf("case variant: %+v, %v", b, err)
	}
}
