package schema_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/schema/schematest"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemas returns every embedded schema file compiled (formats
// asserted), by name without ".schema.json".
func schemas(tb testing.TB) map[string]*jsonschema.Schema {
	byName.Do(func() {
		trimmed = map[string]*jsonschema.Schema{}
		for name, s := range schematest.Schemas(tb) {
			trimmed[strings.TrimSuffix(name, ".schema.json")] = s
		}
	})
	return trimmed
}

var (
	byName  sync.Once
	trimmed map[string]*jsonschema.Schema
)

func validate(tb testing.TB, message string, doc []byte) error {
	tb.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		tb.Fatalf("%s: %v", doc, err)
	}
	return schemas(tb)[message].Validate(inst)
}

func TestSchemaFilesEmbedded(t *testing.T) {
	entries, err := fs.Glob(schema.Files(), "*.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(schema.SchemaFiles) {
		t.Errorf("Files holds %v, SchemaFiles lists %v", entries, schema.SchemaFiles)
	}
	for _, name := range schema.SchemaFiles {
		b, err := fs.ReadFile(schema.Files(), name)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Schema string `json:"$schema"`
			ID     string `json:"$id"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Schema != "https://json-schema.org/draft/2020-12/schema" || doc.ID != schema.SchemaBaseURL+name {
			t.Errorf("%s: $schema %q, $id %q", name, doc.Schema, doc.ID)
		}
	}
	schemas(t)
}

func sampleReview() schema.Review {
	return schema.Review{V: 1, Session: "s-1", CallID: "c-1", Operator: "alice@ops", Evidence: "ticket-431",
		Verdict: schema.VerdictNotExecuted, At: "2026-11-29T11:00:00Z",
		Signer: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", Sig: "c2lnbmF0dXJl"}
}

// TestSchemaAcceptsGoEncoding validates what the Go code writes, for every
// message type, against the schema files.
func TestSchemaAcceptsGoEncoding(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	contract := effect.Contract{Effect: effect.NonIdempotent, Revision: "pay-v1"}
	rv := sampleReview()
	events := []schema.Event{
		{V: 1, Seq: 1, Session: "s-1", Epoch: 1, At: at, Type: schema.TypeCall, Call: &schema.Call{
			CallID: "c-1", Tool: "payments.charge", Arguments: json.RawMessage(`{"amount":1234567890123456789}`),
			RequestID: "r-1", ProviderCallID: "toolu_1", StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: "op-1", Contract: contract}}},
		{V: 1, Seq: 2, Session: "s-1", Epoch: 1, At: at, Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}},
		{V: 1, Seq: 3, Session: "s-1", Epoch: 1, At: at, Type: schema.TypeResult, Result: &schema.Result{
			CallID: "c-1", Status: schema.StatusTimeout, Retryable: true, Error: "deadline"}},
		{V: 1, Seq: 4, Session: "s-1", Epoch: 2, At: at, Type: schema.TypeFenced, Fence: &schema.Fence{Epoch: 2, Owner: "worker-2"}},
		{V: 1, Seq: 5, Session: "s-1", Epoch: 2, At: at, Type: schema.TypeCall, Call: &schema.Call{
			CallID: "c-2", Tool: "payments.charge", Arguments: json.RawMessage(`{"amount":1234567890123456789}`), StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: "op-1", Contract: contract, Retry: &schema.RetryLink{
				PriorCallID: "c-1", PriorSeq: 1, PlanID: "p-1", Basis: schema.BasisReviewedNotExecuted, Review: &rv}}}},
		{V: 1, Seq: 6, Session: "s-1", Epoch: 2, At: at, Type: schema.TypeResult, Result: &schema.Result{
			CallID: "c-2", Status: schema.StatusRejected, Stage: schema.StageApproval, Error: "refused"}},
		{V: 1, Seq: 7, Session: "s-1", Epoch: 2, At: at, Type: schema.TypeResult, Result: &schema.Result{
			CallID: "c-3", Status: schema.StatusOK, Output: json.RawMessage(`{"order":"ord-1","n":[1,2.5,null]}`)}},
		{V: 1, Session: "s-1", Epoch: 0, At: at, Type: "tool.progress"},
		{V: 1, Seq: 9, Session: "s-1", Epoch: 2, At: at, Type: schema.TypeCall, Call: &schema.Call{
			CallID: "c-9", Tool: "legacy.tool", Arguments: json.RawMessage(`null`)}},
		{V: 1, Seq: 10, Session: "s-1", Epoch: 2, At: at, Type: schema.TypeCall, Call: &schema.Call{
			CallID: "c-10", Tool: "orders.create", Arguments: json.RawMessage(`{}`), Started: true,
			Operation: &schema.Operation{Task: "t-1", Key: "op-10", Contract: contract}}},
	}
	for i, e := range events {
		line, err := schema.EncodeEvent(e)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if err := validate(t, "event", line); err != nil {
			t.Errorf("event %d %s: %v", i, line, err)
		}
	}
	digest, err := schema.ArgsDigest(json.RawMessage(`{"amount":1234567890123456789}`))
	if err != nil {
		t.Fatal(err)
	}
	plan := schema.Plan{V: 1, PlanID: "p-1", Session: "s-1", Task: "t-1", Tool: "payments.charge",
		Arguments: json.RawMessage(`{"amount":1234567890123456789}`), ArgsDigest: digest, Contract: contract,
		Key: "op-1", PriorCallID: "c-1", PriorSeq: 1, Basis: schema.BasisReviewedNotExecuted, Review: &rv, IssuedAt: at}
	safe := plan
	safe.Basis, safe.Review, safe.Contract = schema.BasisUncertainSafe, nil, effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}
	unsigned := rv
	unsigned.Signer, unsigned.Sig, unsigned.At = "", "", ""
	others := []struct {
		message string
		v       any
	}{
		{"review", rv},
		{"review", unsigned},
		{"plan", plan},
		{"plan", safe},
		{"assessment", schema.Assessment{Session: "s-1", CallID: "c-2", Tool: "payments.charge", Task: "t-1", Key: "op-1",
			Contract: contract, Outcome: schema.OutcomeNotStarted, Evidence: "rejected:approval",
			Decision: schema.DecisionRetryAllowed, Attempts: 2, Chain: []string{"c-1", "c-2"}}},
		{"request", schema.Request{V: 1, RequestID: "r-9", Session: "s-1", Task: "t-1", Tool: "orders.create",
			Arguments: json.RawMessage(`{"sku":"A"}`), ProviderCallID: "toolu_1"}},
		{"request", schema.Request{V: 1, RequestID: "r-10", Session: "s_2", Task: "t-1", Tool: "orders.create", Arguments: json.RawMessage(`[]`)}},
	}
	for _, o := range others {
		b, err := json.Marshal(o.v)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(t, o.message, b); err != nil {
			t.Errorf("%s %s: %v", o.message, b, err)
		}
	}
}

// TestSchemaAcceptsFixtures validates every event of every conformance
// fixture against event.schema.json and every review against
// review.schema.json. A fixture expecting field_too_long must have an event
// the schema refuses (its maxLength).
func TestSchemaAcceptsFixtures(t *testing.T) {
	for _, fx := range loadFixtures(t) {
		t.Run(fx.Name, func(t *testing.T) {
			refused := 0
			for i, raw := range fx.History {
				if err := validate(t, "event", raw); err != nil {
					if fx.expectsCode(schema.CodeFieldTooLong) {
						refused++
						continue
					}
					t.Errorf("event %d: %v", i, err)
				}
			}
			if fx.expectsCode(schema.CodeFieldTooLong) && refused == 0 {
				t.Error("fixture expects field_too_long, but the schema accepts every event")
			}
			if len(fx.Review) > 0 && string(fx.Review) != "null" {
				if err := validate(t, "review", fx.Review); err != nil {
					t.Errorf("review: %v", err)
				}
			}
		})
	}
}

func TestSchemaRejects(t *testing.T) {
	call := `"call":{"call_id":"c-1","tool":"t","arguments":{},"operation":{"task":"t","key":"k","contract":{"effect":"idempotent","revision":"r"}}}`
	env := `"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:01Z"`
	digest := `"sha256:` + strings.Repeat("ab", 32) + `"`
	plan := func(basis, review string) string {
		return `{"v":1,"plan_id":"p","session":"s-1","task":"t","tool":"x","arguments":{},"args_digest":` + digest +
			`,"contract":{"effect":"unknown","revision":"r"},"key":"k","prior_call_id":"c","prior_seq":1,"basis":"` + basis +
			`","review":` + review + `,"issued_at":"2026-11-29T10:00:01Z"}`
	}
	review := `{"v":1,"session":"s-1","call_id":"c","operator":"a","evidence":"e","verdict":"not_executed"}`
	tests := []struct{ name, message, doc string }{
		{"bad status", "event", `{` + env + `,"type":"tool.result","result":{"call_id":"c-1","status":"done"}}`},
		{"stage on failed", "event", `{` + env + `,"type":"tool.result","result":{"call_id":"c-1","status":"failed","stage":"guard"}}`},
		{"rejected without stage", "event", `{` + env + `,"type":"tool.result","result":{"call_id":"c-1","status":"rejected"}}`},
		{"bad stage", "event", `{` + env + `,"type":"tool.result","result":{"call_id":"c-1","status":"rejected","stage":"body"}}`},
		{"bad session", "event", `{"v":1,"session":"s 1","epoch":1,"at":"2026-11-29T10:00:01Z","type":"x"}`},
		{"session too long", "event", `{"v":1,"session":"` + strings.Repeat("a", 129) + `","epoch":1,"at":"2026-11-29T10:00:01Z","type":"x"}`},
		{"wrong version", "event", `{"v":2,"session":"s","epoch":1,"at":"2026-11-29T10:00:01Z","type":"x"}`},
		{"missing epoch", "event", `{"v":1,"session":"s","at":"2026-11-29T10:00:01Z","type":"x"}`},
		{"bad at", "event", `{"v":1,"session":"s","epoch":1,"at":"noon","type":"x"}`},
		{"call without body", "event", `{` + env + `,"type":"tool.call"}`},
		{"call with result body", "event", `{` + env + `,"type":"tool.call",` + call + `,"result":{"call_id":"c-1","status":"ok"}}`},
		{"started with start_marker", "event", `{` + env + `,"type":"tool.call",` + strings.Replace(call, `"arguments":{}`, `"arguments":{},"started":true,"start_marker":true`, 1) + `}`},
		{"started not a boolean", "event", `{` + env + `,"type":"tool.call",` + strings.Replace(call, `"arguments":{}`, `"arguments":{},"started":"yes"`, 1) + `}`},
		{"call without arguments", "event", `{` + env + `,"type":"tool.call","call":{"call_id":"c-1","tool":"t"}}`},
		{"bad effect", "event", `{` + env + `,"type":"tool.call",` + strings.Replace(call, "idempotent", "safe", 1) + `}`},
		{"key too long", "event", `{` + env + `,"type":"tool.call",` + strings.Replace(call, `"key":"k"`, `"key":"`+strings.Repeat("k", 1025)+`"`, 1) + `}`},
		{"retry bad basis", "event", `{` + env + `,"type":"tool.call",` + strings.Replace(call, `"revision":"r"}`, `"revision":"r"},"retry":{"prior_call_id":"c","plan_id":"p","basis":"hope"}`, 1) + `}`},
		{"fence without epoch", "event", `{` + env + `,"type":"session.fenced","fence":{}}`},
		{"review bad verdict", "review", strings.Replace(review, "not_executed", "maybe", 1)},
		{"review empty operator", "review", strings.Replace(review, `"operator":"a"`, `"operator":""`, 1)},
		{"review sig without signer", "review", strings.Replace(review, `}`, `,"sig":"abc"}`, 1)},
		{"plan reviewed without review", "plan", plan("reviewed_not_executed", "null")},
		{"plan bad digest", "plan", strings.Replace(plan("uncertain_safe", "null"), digest, `"md5:x"`, 1)},
		{"plan bad basis", "plan", plan("because", "null")},
		{"assessment bad outcome", "assessment", `{"session":"s","call_id":"c","tool":"t","task":"t","key":"k","contract":{"effect":"unknown","revision":"r"},"outcome":"done","evidence":"ok","decision":"refuse","attempts":1,"chain":["c"]}`},
		{"assessment empty chain", "assessment", `{"session":"s","call_id":"c","tool":"t","task":"t","key":"k","contract":{"effect":"unknown","revision":"r"},"outcome":"completed","evidence":"ok","decision":"refuse","attempts":1,"chain":[]}`},
		{"request without request_id", "request", `{"v":1,"session":"s","task":"t","tool":"x","arguments":{}}`},
		{"request bad session", "request", `{"v":1,"request_id":"r","session":"a.b","task":"t","tool":"x","arguments":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := validate(t, tt.message, []byte(tt.doc)); err == nil {
				t.Errorf("%s schema accepts %s", tt.message, tt.doc)
			}
		})
	}
	// Either flag alone is fine: the negative case above fails for the
	// pair only.
	for _, flags := range []string{`"started":true`, `"started":true,"start_marker":false`, `"started":false,"start_marker":true`, `"start_marker":true`} {
		doc := `{` + env + `,"type":"tool.call",` + strings.Replace(call, `"arguments":{}`, `"arguments":{},`+flags, 1) + `}`
		if err := validate(t, "event", []byte(doc)); err != nil {
			t.Errorf("call with %s: %v", flags, err)
		}
	}
	// The reviewed plan with a review is fine: the negative case above
	// fails for the missing review only.
	if err := validate(t, "plan", []byte(plan("reviewed_not_executed", review))); err != nil {
		t.Errorf("reviewed plan: %v", err)
	}
}
