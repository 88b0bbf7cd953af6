package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker/service"
)

// requestCall publishes a tool request as the agent role would, on
// jw.requests.<session> (task t-1): the serve's tool worker records it.
func requestCall(t *testing.T, url, data, session, requestID, tool, args string) {
	t.Helper()
	nc := connectRole(t, url, data, access.RoleAgent)
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(schema.Request{V: 1, RequestID: requestID, Session: session, Task: "t-1", Tool: tool, Arguments: json.RawMessage(args)})
	if _, err := js.Publish(context.Background(), "jw.requests."+session, b); err != nil {
		t.Fatal(err)
	}
}

// waitingCall waits until jw.api.status lists a call of session waiting
// for approval and returns its id.
func waitingCall(t *testing.T, url, data, session string) string {
	t.Helper()
	nc := connectRole(t, url, data, access.RoleReviewer)
	defer nc.Close()
	cl := service.NewClient(nc, service.ClientConfig{Timeout: 5 * time.Second})
	var id string
	streamtest.Eventually(t, 30*time.Second, "a call of "+session+" waits for approval", func() bool {
		st, err := cl.Status(context.Background(), service.StatusRequest{Session: session})
		if err == nil && len(st.AwaitingApproval) > 0 {
			id = st.AwaitingApproval[0].CallID
		}
		return id != ""
	})
	return id
}

// sessionEvents loads a session's log as the host role.
func sessionEvents(t *testing.T, url, data, session string) []schema.Event {
	t.Helper()
	nc := connectRole(t, url, data, access.RoleHost)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	topo, err := stream.OpenTopology(context.Background(), js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := topo.Logs().Load(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// ledgerCharges counts the example ledger's charges by session.
func ledgerCharges(t *testing.T, url, data string) map[string]int {
	t.Helper()
	nc := connectRole(t, url, data, access.RoleWorker)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	tl, err := tools.New(context.Background(), tools.Config{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	led, err := tl.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, c := range led {
		n[c.Session]++
	}
	return n
}

// callToken opens a call's page and returns its CSRF token.
func (w *webClient) callToken(session, callID string) (string, string) {
	w.t.Helper()
	_, body := w.get("/call?" + url.Values{"session": {session}, "call": {callID}}.Encode())
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		w.t.Fatalf("no CSRF token on the call page: %s", body)
	}
	return m[1], body
}

// answerForm is the form the console's page posts once the approver's
// browser signed the answer with kp.
func answerForm(t *testing.T, kp nkeys.KeyPair, token, session, callID, decision string) url.Values {
	t.Helper()
	a, err := recovery.SignApproval(kp, schema.Approval{V: schema.Version, Session: session, CallID: callID, Decision: schema.ApprovalDecision(decision),
		Approver: "carol@finance", Reason: "ticket FIN-7", At: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(a)
	return url.Values{"csrf": {token}, "kind": {"approval"}, "session": {session}, "call": {callID}, "signed": {string(b)}}
}

// TestConsoleApprovals: a payment that requires approval shows in the
// console's pending list (tool, arguments, task, deadline, its events) and
// in jingwei_approvals_pending; a forged or cross-origin POST is refused
// and changes nothing; an answer signed by an approver key the tool
// workers do not trust is refused (invalid_approval) by the console that
// knows the approvers before anything is published, and by the tool
// worker when relayed by a console that does not, and the call still
// waits; carol's approval (serve's approver key, named in the approvers
// file) is honoured (approval.granted), shown with her name, and the body
// runs once, and the same answer again is refused before
// anything is published; a denial ends its call rejected at stage
// approval with no charge; a stopped task shows on /stopped and in
// jingwei_tasks_stopped.
func TestConsoleApprovals(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	natsURL, serveErr, _ := startServe(t, dir, "--require-approval", "payments.charge:amount_cents>1000", "--metrics", "127.0.0.1:0")
	serveMetrics := metricsURL(t, serveErr)
	carol := personKey(t, dir, approverKeyFile)
	rogueKey, _ := nkeys.CreateUser()
	approvers := trustFile(t, "approvers", map[string]nkeys.KeyPair{"Carol Finance": carol})
	base, consoleErr := startConsoleLog(t, natsURL, dir, "--trust-approvers", approvers, "--metrics", "127.0.0.1:0")
	consoleMetrics := metricsURL(t, consoleErr)
	// A console that does not know the approvers (an empty --auth dir).
	rogue := startConsole(t, natsURL, dir, "--trust-approvers", "", "--auth", t.TempDir(),
		"--reviewer-nkey", filepath.Join(dir, "auth", "reviewer.nk"), "--host-nkey", filepath.Join(dir, "auth", "host.nk"))
	w, rw := newWebClient(t, base), newWebClient(t, rogue)

	requestCall(t, natsURL, dir, "ap-1", "r-1", tools.PaymentsCharge, `{"account":"acct-big","amount_cents":250000}`)
	call := waitingCall(t, natsURL, dir, "ap-1")
	streamtest.Eventually(t, 30*time.Second, "the payment in the console's pending list", func() bool {
		_, body := w.get("/")
		return strings.Contains(body, `data-approval="`+call+`"`)
	})
	_, front := w.get("/")
	for _, want := range []string{"Approvals pending", tools.PaymentsCharge, "acct-big", "approval.requested", "t-1", "then rejected at stage approval"} {
		if !strings.Contains(front, want) {
			t.Fatalf("the pending list lacks %q:\n%s", want, front)
		}
	}
	if got := scrapeMetrics(t, serveMetrics); got["jingwei_approvals_pending"] != 1 {
		t.Fatalf("jingwei_approvals_pending = %v while the payment waits, want 1", got["jingwei_approvals_pending"])
	}
	token, page := w.callToken("ap-1", call)
	if !strings.Contains(page, `form class="decide approval"`) || strings.Contains(page, `form class="decide review"`) {
		t.Fatalf("the call page of a waiting call should offer the approval form only:\n%s", page)
	}
	approvals := func() uint64 {
		nc := connectRole(t, natsURL, dir, access.RoleHost)
		defer nc.Close()
		js, _ := jetstream.New(nc)
		s, err := js.Stream(context.Background(), "JW_APPROVALS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	before := approvals()

	// Forged POSTs: no token, another browser's token, cross-site.
	forged := answerForm(t, carol, token, "ap-1", call, "approved")
	forged.Del("csrf")
	if code, _ := w.post("/decide", forged, nil); code != http.StatusForbidden {
		t.Fatalf("approval without a CSRF token: %d, want 403", code)
	}
	if code, _ := rw.post("/decide", answerForm(t, carol, token, "ap-1", call, "approved"), nil); code != http.StatusForbidden {
		t.Fatalf("approval with another console's token: %d, want 403", code)
	}
	if code, _ := w.post("/decide", answerForm(t, carol, token, "ap-1", call, "approved"), map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Fatalf("cross-site approval: %d, want 403", code)
	}
	if n := approvals(); n != before {
		t.Fatalf("forged POSTs published %d answers", n-before)
	}

	// An untrusted approver key: refused before publishing by the console
	// that knows the approvers; relayed by the other, refused by the tool
	// worker; the call still waits.
	code, body := w.post("/decide", answerForm(t, rogueKey, token, "ap-1", call, "approved"), nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome refused"`) || !strings.Contains(body, "invalid_approval") || !strings.Contains(body, "nothing published") {
		t.Fatalf("untrusted approval: %d, want the refusal invalid_approval, nothing published:\n%s", code, body)
	}
	if n := approvals(); n != before {
		t.Fatalf("an untrusted approval was published by the console that knows the approvers")
	}
	unsignedForm := answerForm(t, carol, token, "ap-1", call, "approved")
	unsignedForm.Del("signed")
	if code, body := w.post("/decide", unsignedForm, nil); code != http.StatusOK || !strings.Contains(body, "not signed") {
		t.Fatalf("unsigned approval: %d, want refused (the console signs nothing):\n%s", code, body)
	}
	rtoken, _ := rw.callToken("ap-1", call)
	code, body = rw.post("/decide", answerForm(t, rogueKey, rtoken, "ap-1", call, "approved"), nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome refused"`) || !strings.Contains(body, "approval_pending") {
		t.Fatalf("untrusted approval relayed: %d, want it not honoured (approval_pending):\n%s", code, body)
	}
	if waitingCall(t, natsURL, dir, "ap-1") != call {
		t.Fatal("the call no longer waits after an untrusted approval")
	}
	for _, ev := range sessionEvents(t, natsURL, dir, "ap-1") {
		if ev.Type == schema.TypeApprovalGranted || ev.Type == schema.TypeStarted {
			t.Fatalf("an untrusted approval was honoured: %s at seq %d", ev.Type, ev.Seq)
		}
	}

	// Carol approves: honoured, the body runs once.
	code, body = w.post("/decide", answerForm(t, carol, token, "ap-1", call, "approved"), nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome ok"`) || !strings.Contains(body, "approval.granted recorded") || !strings.Contains(body, "Approved by Carol Finance") {
		t.Fatalf("approval: %d, want approval.granted:\n%s", code, body)
	}
	streamtest.Eventually(t, 30*time.Second, "the approved payment charges once", func() bool { return ledgerCharges(t, natsURL, dir)["ap-1"] == 1 })
	// The same answer again: the call no longer waits, nothing published.
	n := approvals()
	code, body = w.post("/decide", answerForm(t, carol, token, "ap-1", call, "approved"), nil)
	if code != http.StatusOK || !strings.Contains(body, "nothing published") || !strings.Contains(body, "invalid_approval") {
		t.Fatalf("second approval: %d, want refused before publishing:\n%s", code, body)
	}
	if approvals() != n {
		t.Fatal("the second approval was published")
	}
	_, page = w.get("/call?" + url.Values{"session": {"ap-1"}, "call": {call}}.Encode())
	if !strings.Contains(page, "<strong>Carol Finance</strong>") || !strings.Contains(page, "carol@finance") || !strings.Contains(page, "ticket FIN-7") || strings.Contains(page, `form class="decide approval"`) {
		t.Fatalf("the call page after the approval should show it on record and no form:\n%s", page)
	}

	// A denial: rejected at stage approval, no charge.
	requestCall(t, natsURL, dir, "ap-2", "r-1", tools.PaymentsCharge, `{"account":"acct-no","amount_cents":990000}`)
	call2 := waitingCall(t, natsURL, dir, "ap-2")
	token2, _ := w.callToken("ap-2", call2)
	code, body = w.post("/decide", answerForm(t, carol, token2, "ap-2", call2, "denied"), nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome ok"`) || !strings.Contains(body, "rejected at stage approval") {
		t.Fatalf("denial: %d, want rejected at stage approval:\n%s", code, body)
	}
	var res *schema.Result
	for _, ev := range sessionEvents(t, natsURL, dir, "ap-2") {
		if ev.Result != nil && ev.Result.CallID == call2 {
			res = ev.Result
		}
	}
	if res == nil || res.Status != schema.StatusRejected || res.Stage != schema.StageApproval {
		t.Fatalf("denied call's result %+v, want rejected at stage approval", res)
	}
	streamtest.Eventually(t, 30*time.Second, "no call waits for approval in the metrics", func() bool {
		return scrapeMetrics(t, serveMetrics)["jingwei_approvals_pending"] == 0
	})
	if n := ledgerCharges(t, natsURL, dir); n["ap-1"] != 1 || n["ap-2"] != 0 {
		t.Fatalf("ledger charges %v, want ap-1:1 (approved, once) and ap-2:0 (denied)", n)
	}

	cm := scrapeMetrics(t, consoleMetrics)
	for k, v := range map[string]float64{
		`jingwei_console_approvals_total{decision="approved",result="honoured"}`: 1,
		`jingwei_console_approvals_total{decision="approved",result="late"}`:     1,
		`jingwei_console_approvals_total{decision="denied",result="honoured"}`:   1,
	} {
		if cm[k] != v {
			t.Errorf("console: %s = %v, want %v", k, cm[k], v)
		}
	}

	// A stopped task is browsable and counted.
	hc := connectRole(t, natsURL, dir, access.RoleHost)
	defer hc.Close()
	hjs, _ := jetstream.New(hc)
	if _, err := stream.PublishStop(context.Background(), hjs, "jw", schema.StopRequest{V: 1, Session: "ap-2", Task: "t-1", Reason: "fraud suspected", At: time.Now().UTC().Format(time.RFC3339)}); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 30*time.Second, "the stopped task on /stopped", func() bool {
		_, body := w.get("/stopped")
		return strings.Contains(body, "fraud suspected") && strings.Contains(body, `badge host`) && strings.Contains(body, "ap-2")
	})
	if got := scrapeMetrics(t, serveMetrics); got["jingwei_tasks_stopped"] != 1 {
		t.Fatalf("jingwei_tasks_stopped = %v, want 1", got["jingwei_tasks_stopped"])
	}
}
