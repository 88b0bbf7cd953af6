package service_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/schema/schematest"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

func check(t *testing.T, s *jsonschema.Schema, doc []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return s.Validate(inst)
}

// TestServiceSchemasAcceptGoEncoding validates what the Go types of the
// service bodies, the error body and the jw_plans record encode to
// against their schema files, checks that every endpoint's metadata names
// files that exist, and that the schemas refuse what the Go side refuses.
func TestServiceSchemasAcceptGoEncoding(t *testing.T) {
	s := schematest.Schemas(t)
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	contract := effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}
	rv := schema.Review{V: 1, Session: "s-1", CallID: "c-1", Operator: "alice@ops", Evidence: "ticket-1", Verdict: schema.VerdictNotExecuted, At: "2026-11-29T11:00:00Z"}
	a := schema.Assessment{Session: "s-1", CallID: "c-1", Tool: "orders.create", Task: "t-1", Key: "op-1", Contract: contract,
		Outcome: schema.OutcomeUncertain, Evidence: "no_result", Decision: schema.DecisionNeedsReview, Attempts: 1, Chain: []string{"c-1"}}
	digest, err := schema.ArgsDigest(json.RawMessage(`{"sku":"A"}`))
	if err != nil {
		t.Fatal(err)
	}
	plan := schema.Plan{V: 1, PlanID: "p-1", Session: "s-1", Task: "t-1", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A"}`), ArgsDigest: digest,
		Contract: contract, Key: "op-1", PriorCallID: "c-1", PriorSeq: 1, Basis: schema.BasisUncertainSafe, IssuedAt: at}
	good := []struct {
		file string
		v    any
	}{
		{"target.schema.json", service.Target{Session: "s-1", CallID: "c-1"}},
		{"statusrequest.schema.json", service.StatusRequest{}},
		{"statusrequest.schema.json", service.StatusRequest{Session: "s-1", CallID: "c-1"}},
		{"status.schema.json", service.Status{OpenCalls: []service.OpenCall{}, AwaitingReview: []schema.Assessment{}}},
		{"status.schema.json", service.Status{Session: "s-1",
			OpenCalls:      []service.OpenCall{{Session: "s-1", CallID: "c-2", Tool: "orders.create", Task: "t-1", Key: "op-2", Contract: contract, Epoch: 1, Seq: 4, Started: true}},
			AwaitingReview: []schema.Assessment{a},
			Plans:          service.PlanCounts{Issued: 1, Consumed: 2, IssuedIDs: []string{"p-1"}},
			Stats:          service.Stats{EventsSeen: 10, OpenCalls: 1},
			Reviews:        []service.ReviewCheck{{Seq: 3, Review: rv, Accepted: false, Code: "invalid_review", Reason: "not signed"}}}},
		{"errorbody.schema.json", schema.NewErrorBody(schema.Errorf(schema.CodeNeedsReview, "review first"))},
		{"errorbody.schema.json", schema.NewErrorBody(&schema.Error{Code: schema.CodeSupersededCall, Message: "later", Latest: "c-2"})},
		{"errorbody.schema.json", schema.NewErrorBody(&schema.Error{Code: schema.CodeRejected, Stage: schema.StageApproval, CallID: "c-3", Message: "denied"})},
		{"errorbody.schema.json", schema.NewErrorBody(errors.New("disk full"))},
		{"planrecord.schema.json", stream.PlanRecord{State: stream.PlanIssued, Plan: plan}},
		{"planrecord.schema.json", stream.PlanRecord{State: stream.PlanConsumed, Plan: plan, ConsumedBy: "c-9", ConsumedAt: at, ConsumedEpoch: 2, CompletedEpoch: 3}},
	}
	for _, g := range good {
		b, err := json.Marshal(g.v)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(t, s[g.file], b); err != nil {
			t.Errorf("%s refuses %s: %v", g.file, b, err)
		}
	}
	bad := []struct{ file, doc string }{
		{"target.schema.json", `{"session":"s-1"}`},
		{"target.schema.json", `{"session":"a.b","call_id":"c-1"}`},
		{"statusrequest.schema.json", `{"call_id":"c-1"}`},
		{"errorbody.schema.json", `{"error":{"message":"no code"}}`},
		{"status.schema.json", `{"open_calls":[]}`},
		{"planrecord.schema.json", `{"state":"spent","plan":{}}`},
	}
	for _, b := range bad {
		if err := check(t, s[b.file], []byte(b.doc)); err == nil {
			t.Errorf("%s accepts %s", b.file, b.doc)
		}
	}
	for _, e := range []string{service.EndpointCall, service.EndpointInspect, service.EndpointPrepare, service.EndpointStatus} {
		for k, f := range service.EndpointMetadata(e) {
			if s[f] == nil || !strings.HasSuffix(f, ".schema.json") {
				t.Errorf("endpoint %s metadata %s=%s names no schema file", e, k, f)
			}
		}
	}
}
