package test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker/service"
)

// TestRequestsThatCannotBecomeCalls: every request a tool worker cannot
// run gets a durable answer with its own code within a second (stretched
// by the machine's load, streamtest.LoadScaled), whether it
// was published on jw.requests.<session> or sent to jw.api.call: arguments
// nested too deep or too large to be wrapped in a tool.call, an unknown
// tool, a task that is not an id, a tool name over the limit. Nothing is
// written to the session log (no fence either), tool_calls stays as it
// was, the request leaves the work queue, and a later call in the same
// session still works.
func TestRequestsThatCannotBecomeCalls(t *testing.T) {
	s := startStack(t, time.Second, nil)
	s.worker("tw-1", nil)
	ctx := s.ctx
	const session = "s-answers"
	deep := strings.Repeat(`{"a":`, 9999) + "1" + strings.Repeat("}", 9999)
	big := `{"sku":"` + strings.Repeat("x", int(s.nc.MaxPayload())-2048) + `","qty":1}`
	cases := []struct {
		name, task, tool, args string
		code                   schema.Code
	}{
		{"arguments nested 9,999 deep", "t-1", tools.CatalogLookup, deep, schema.CodeRequestTooLarge},
		{"arguments just under the payload limit", "t-1", tools.OrdersCreate, big, schema.CodeRequestTooLarge},
		{"unknown tool", "t-1", "no.such.tool", `{}`, schema.CodeUnknownTool},
		{"task with a space", "my task", tools.CatalogLookup, `{"sku":"A-1"}`, schema.CodeInvalidRequest},
		{"task with a dot", "orders.v1", tools.CatalogLookup, `{"sku":"A-1"}`, schema.CodeInvalidRequest},
		{"tool name over the limit", "t-1", strings.Repeat("t", schema.MaxFieldBytes+1), `{}`, schema.CodeInvalidRequest},
	}
	budget := stream.NewBudget(s.topo.Budget)
	before := func() (int, int64) {
		h, err := s.topo.Logs().Load(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := budget.Get(ctx, session, "t-1")
		return len(h), u.ToolCalls
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			events, calls := before()
			q := schema.Request{V: 1, RequestID: fmt.Sprintf("r-pub-%d", i), Session: session, Task: tc.task, Tool: tc.tool, Arguments: json.RawMessage(tc.args)}
			// Published straight on the work queue: the worker answers.
			b, _ := json.Marshal(q)
			t0 := time.Now()
			if _, err := s.topo.JS.Publish(ctx, s.topo.Names().RequestsSubject(session), b); err != nil {
				t.Fatal(err)
			}
			var a schema.Answer
			streamtest.Eventually(t, waitLimit, "the answer", func() bool {
				var ok bool
				a, ok, _ = s.topo.Answers().FindAnswer(ctx, session, q.RequestID)
				return ok
			})
			if took, bound := time.Since(t0), streamtest.LoadScaled(time.Second); took > bound {
				t.Errorf("answer after %s, want within a second (%s at this load)", took, bound)
			}
			if a.Code != tc.code || a.Message == "" {
				t.Fatalf("answer %+v, want code %s", a, tc.code)
			}
			// Through jw.api.call: answered at once, with the same code.
			q.RequestID = fmt.Sprintf("r-api-%d", i)
			t0 = time.Now()
			if code := s.api(service.EndpointCall, q, nil); code != string(tc.code) {
				t.Fatalf("jw.api.call: code %q, want %s", code, tc.code)
			}
			if took, bound := time.Since(t0), streamtest.LoadScaled(time.Second); took > bound {
				t.Errorf("jw.api.call answered after %s, want within a second (%s at this load)", took, bound)
			}
			streamtest.Eventually(t, waitLimit, "the work queue empty", func() bool {
				info, err := s.topo.Requests.Info(ctx)
				return err == nil && info.State.Msgs == 0
			})
			if e, c := before(); e != events || c != calls {
				t.Fatalf("session log %d → %d events, tool_calls %d → %d: a refused request changed them", events, e, calls, c)
			}
		})
	}
	// The session still works.
	var res schema.Event
	if code := s.api(service.EndpointCall, schema.Request{V: 1, RequestID: "r-ok", Session: session, Task: "t-1", Tool: tools.CatalogLookup, Arguments: json.RawMessage(`{"sku":"A-1"}`)}, &res); code != "" || res.Result == nil || res.Result.Status != schema.StatusOK {
		t.Fatalf("a valid call after the refusals: %q %+v", code, res)
	}
}
