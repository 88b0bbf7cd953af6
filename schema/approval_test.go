package schema_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
)

func sampleApproval() schema.Approval {
	return schema.Approval{V: 1, Session: "s-1", CallID: "c-1", Decision: schema.Approved, Approver: "alice@ops",
		Reason: "ticket-9", At: "2026-11-29T10:05:00Z",
		Signer: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", Sig: "c2lnbmF0dXJl"}
}

// TestApprovalEventsRoundTrip encodes the approval and stop events, checks
// them against event.schema.json, and decodes them back unchanged; the
// approval and the approval request messages pass their schema files.
func TestApprovalEventsRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	ap := sampleApproval()
	events := []schema.Event{
		{V: 1, Seq: 2, Session: "s-1", Epoch: 1, At: at, Type: schema.TypeApprovalRequested,
			ApprovalRequest: &schema.ApprovalRequest{CallID: "c-1", Deadline: at.Add(time.Minute)}},
		{V: 1, Seq: 3, Session: "s-1", Epoch: 2, At: at, Type: schema.TypeApprovalGranted, Approval: &ap},
		{V: 1, Seq: 4, Session: "s-1", Epoch: 2, At: at, Type: schema.TypeTaskStopped,
			Stop: &schema.Stop{Task: "t-1", By: schema.StoppedByHost, Reason: "operator said so"}},
	}
	for i, e := range events {
		line, err := schema.EncodeEvent(e)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if err := validate(t, "event", line); err != nil {
			t.Errorf("event %d %s: %v", i, line, err)
		}
		got, err := schema.DecodeEvent(line)
		if err != nil {
			t.Fatalf("event %d %s: %v", i, line, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("event %d: decoded %+v, want %+v", i, got, e)
		}
		if got.CallID() != e.CallID() {
			t.Errorf("event %d: CallID %q", i, got.CallID())
		}
	}
	b, _ := json.Marshal(ap)
	if err := validate(t, "approval", b); err != nil {
		t.Errorf("approval %s: %v", b, err)
	}
	if got, err := schema.DecodeApproval(b); err != nil || got != ap {
		t.Errorf("DecodeApproval = %+v, %v", got, err)
	}
	digest, _ := schema.ArgsDigest(json.RawMessage(`{"amount":5000}`))
	req, _ := json.Marshal(schema.AskedApproval{V: 1, Session: "s-1", CallID: "c-1", Task: "t-1", Tool: "payments.charge",
		Arguments: []byte(`{"amount":5000}`), ArgsDigest: digest, Deadline: at, At: at})
	if err := validate(t, "approvalrequest", req); err != nil {
		t.Errorf("approval request %s: %v", req, err)
	}
	stop := schema.StopRequest{V: 1, Session: "s-1", Task: "t-1", Reason: "runaway agent", At: "2026-11-29T10:05:00Z"}
	if err := stop.Validate(); err != nil {
		t.Fatal(err)
	}
	sb, _ := json.Marshal(stop)
	if err := validate(t, "taskstop", sb); err != nil {
		t.Errorf("task stop %s: %v", sb, err)
	}
	for _, bad := range []schema.StopRequest{{V: 1, Session: "s-1"}, {V: 1, Session: "s.1", Task: "t"}, {V: 2, Session: "s", Task: "t"}} {
		if bad.Validate() == nil {
			t.Errorf("stop %+v accepted", bad)
		}
	}
}

// TestApprovalEventsRefused: malformed approval and stop events are
// corrupt_history, and malformed approvals invalid_approval, in Go and in
// the schema files alike.
func TestApprovalEventsRefused(t *testing.T) {
	env := `{"v":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:00Z",`
	sig := `"signer":"UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4","sig":"c2ln"`
	for name, line := range map[string]string{
		"requested without deadline":  env + `"type":"approval.requested","approval_request":{"call_id":"c-1"}}`,
		"requested without call":      env + `"type":"approval.requested","approval_request":{"deadline":"2026-11-29T10:00:00Z"}}`,
		"requested without body":      env + `"type":"approval.requested"}`,
		"granted with a denial":       env + `"type":"approval.granted","approval":{"v":1,"session":"s-1","call_id":"c-1","decision":"denied","approver":"a",` + sig + `}}`,
		"granted for another session": env + `"type":"approval.granted","approval":{"v":1,"session":"s-2","call_id":"c-1","decision":"approved","approver":"a",` + sig + `}}`,
		"granted blank approver":      env + `"type":"approval.granted","approval":{"v":1,"session":"s-1","call_id":"c-1","decision":"approved","approver":" ",` + sig + `}}`,
		"granted case variant":        env + `"type":"approval.granted","approval":{"v":1,"session":"s-1","call_id":"c-1","Call_ID":"c-2","decision":"approved","approver":"a",` + sig + `}}`,
		"stop by someone else":        env + `"type":"task.stopped","stop":{"task":"t-1","by":"model"}}`,
		"stop of a bad task":          env + `"type":"task.stopped","stop":{"task":"t.1","by":"host"}}`,
		"stop with a call body":       env + `"type":"task.stopped","stop":{"task":"t-1","by":"host"},"started":{"call_id":"c-1"}}`,
		"duplicate member":            env + `"type":"task.stopped","stop":{"task":"t-1","task":"t-2","by":"host"}}`,
	} {
		_, err := schema.DecodeEvent([]byte(line))
		if schema.CodeOf(err) != schema.CodeCorruptHistory {
			t.Errorf("%s: DecodeEvent = %v, want corrupt_history", name, err)
		}
		if name != "granted for another session" && name != "granted blank approver" && name != "stop of a bad task" && name != "duplicate member" && name != "granted case variant" {
			if err := validate(t, "event", []byte(line)); err == nil {
				t.Errorf("%s: the schema accepts it", name)
			}
		}
	}
	for name, b := range map[string]string{
		"not json":       `{"v":1`,
		"bad decision":   `{"v":1,"session":"s-1","call_id":"c-1","decision":"maybe","approver":"a"}`,
		"no approver":    `{"v":1,"session":"s-1","call_id":"c-1","decision":"approved"}`,
		"sig alone":      `{"v":1,"session":"s-1","call_id":"c-1","decision":"approved","approver":"a","sig":"c2ln"}`,
		"long reason":    `{"v":1,"session":"s-1","call_id":"c-1","decision":"approved","approver":"a","reason":"` + strings.Repeat("x", 1025) + `"}`,
		"case variant":   `{"v":1,"session":"s-1","call_id":"c-1","decision":"approved","approver":"a","Decision":"denied"}`,
		"duplicate name": `{"v":1,"session":"s-1","call_id":"c-1","decision":"approved","decision":"denied","approver":"a"}`,
	} {
		if _, err := schema.DecodeApproval([]byte(b)); err == nil {
			t.Errorf("%s: DecodeApproval accepted %s", name, b)
		}
	}
	// An unknown type may carry members named like the new bodies: they
	// mean nothing there.
	ev, err := schema.DecodeEvent([]byte(env + `"type":"tool.progress","stop":{"x":1},"approval":7}`))
	if err != nil || ev.Stop != nil || ev.Approval != nil {
		t.Errorf("unknown type: %+v, %v", ev, err)
	}
}
