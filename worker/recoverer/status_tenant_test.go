package recoverer

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// TestStatusTenantScoped: jw.api.status.<tenant> (what a tenant's agent
// reaches through its account's import) answers about the tenant's own
// sessions only: another tenant's session, alone or with a call id (its
// reviews), is forbidden, and the list of all sessions holds only the
// tenant's, without the fleet-wide counters; the operators' jw.api.status
// still sees every session.
func TestStatusTenantScoped(t *testing.T) {
	e := setup(t, 0)
	e.run(e.recoverer("a"))
	e.writer("acme-1", "w1").call("c-a", "orders.create", effect.Idempotent, "k-a")
	e.writer("beta-1", "w2").call("c-b", "payments.charge", effect.NonIdempotent, "k-b")
	e.writer("s-1", "w3").call("c-s", "orders.create", effect.Idempotent, "k-s")

	ask := func(subject string, body service.StatusRequest) (service.Status, string) {
		t.Helper()
		b, _ := json.Marshal(body)
		var m *nats.Msg
		var err error
		streamtest.Eventually(t, 5*time.Second, "service answers", func() bool {
			m, err = e.nc.Request(subject, b, 5*time.Second)
			return err != nats.ErrNoResponders
		})
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		var st service.Status
		if code := service.AnswerCode(m); code != "" {
			return st, code
		}
		if err := json.Unmarshal(m.Data, &st); err != nil {
			t.Fatalf("%s: %s", subject, m.Data)
		}
		return st, ""
	}
	sessions := func(st service.Status) map[string]bool {
		out := map[string]bool{}
		for _, c := range st.OpenCalls {
			out[c.Session] = true
		}
		return out
	}
	streamtest.Eventually(t, 10*time.Second, "the classifier tracks the three calls", func() bool {
		st, _ := ask("jw.api.status", service.StatusRequest{})
		return len(sessions(st)) == 3
	})
	st, code := ask("jw.api.status.acme", service.StatusRequest{})
	if got := sessions(st); code != "" || len(got) != 1 || !got["acme-1"] || st.Stats.EventsSeen != 0 {
		t.Fatalf("tenant acme, all sessions: %s %v stats %+v", code, got, st.Stats)
	}
	if st, code := ask("jw.api.status.acme", service.StatusRequest{Session: "acme-1"}); code != "" || len(st.OpenCalls) != 1 || st.OpenCalls[0].CallID != "c-a" {
		t.Fatalf("tenant acme, its session: %s %+v", code, st)
	}
	for _, req := range []service.StatusRequest{{Session: "beta-1"}, {Session: "beta-1", CallID: "c-b"}, {Session: "s-1"}, {Session: "acme_x-1"}} {
		if st, code := ask("jw.api.status.acme", req); code != string(schema.CodeForbidden) {
			t.Errorf("ATTACK: tenant acme asked about %+v: %s %+v", req, code, st)
		}
	}
	// A subject whose last token is no tenant name is refused unanswered.
	if _, code := ask("jw.api.status.a-b", service.StatusRequest{}); code != string(schema.CodeForbidden) {
		t.Errorf("jw.api.status.a-b: %s", code)
	}
	if st, code := ask("jw.api.status", service.StatusRequest{Session: "beta-1"}); code != "" || len(st.OpenCalls) != 1 {
		t.Fatalf("operator, beta-1: %s %+v", code, st)
	}
}
