package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker/service"
)

var consoleURLRE = regexp.MustCompile(`jingwei console on (http://\S+)/ `)

// startConsole runs `jingwei console` against a serve on url with data
// directory data (its role keys, its trusted reviewer key unless key is
// given) until the test ends; it returns the console's base URL.
func startConsole(t *testing.T, url, data, key string, extra ...string) string {
	t.Helper()
	base, _ := startConsoleLog(t, url, data, key, extra...)
	return base
}

// startConsoleLog is startConsole that also returns the console's stderr.
func startConsoleLog(t *testing.T, url, data, key string, extra ...string) (string, *lockedBuffer) {
	t.Helper()
	if key == "" {
		key = filepath.Join(data, reviewerKeyFile)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	args := append([]string{"console", "--server", url, "--auth", filepath.Join(data, "auth"), "--key", key,
		"--listen", "127.0.0.1:0", "--poll", "100ms", "--log-level", "warn"}, extra...)
	go func() { done <- run(ctx, args, &out, &errb) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("console exited %d after cancel: %s", code, errb.String())
			}
		case <-time.After(15 * time.Second):
			t.Errorf("console did not stop within 15s of cancel")
		}
	})
	var base string
	streamtest.Eventually(t, 20*time.Second, "the console prints its URL", func() bool {
		select {
		case code := <-done:
			t.Fatalf("console exited %d: %s", code, errb.String())
		default:
		}
		if m := consoleURLRE.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			return true
		}
		return false
	})
	return base, &errb
}

// openPayment records, as a tool worker that then died would have, a
// payments.charge call (non-idempotent) whose body started and that has no
// result; the writer's lease is left to expire (serve runs with
// --lease-ttl 1s), so the recovery worker fences the session and assesses
// the call uncertain: needs_review.
func openPayment(t *testing.T, url, data, session, callID, args string) {
	t.Helper()
	ctx := context.Background()
	nc := connectRole(t, url, data, stream.RoleWorker)
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := topo.AcquireLease(ctx, session, "crashed-writer-"+session)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Fence(ctx, session, "crashed-writer-"+session, lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	contract := effect.Contract{Effect: effect.NonIdempotent, Revision: tools.PaymentsRevision}
	for _, ev := range []schema.Event{
		{Type: schema.TypeCall, Call: &schema.Call{CallID: callID, Tool: tools.PaymentsCharge, Arguments: json.RawMessage(args),
			StartMarker: true, Operation: &schema.Operation{Task: "t-1", Key: "op-" + callID, Contract: contract}}},
		{Type: schema.TypeStarted, Started: &schema.Started{CallID: callID}},
	} {
		if _, err := lg.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	// No release, no renewal: the writer is gone.
}

// webClient is a browser stand-in: a cookie jar, and the console's base
// URL as its origin.
type webClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newWebClient(t *testing.T, base string) *webClient {
	jar, _ := cookiejar.New(nil)
	return &webClient{t: t, base: base, c: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

func (w *webClient) get(path string) (int, string) {
	w.t.Helper()
	resp, err := w.c.Get(w.base + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// post posts form to path as the console's own page does (same origin),
// unless hdr says otherwise; it follows the redirect.
func (w *webClient) post(path string, form url.Values, hdr map[string]string) (int, string) {
	w.t.Helper()
	req, err := http.NewRequest(http.MethodPost, w.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", w.base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := w.c.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// callPage waits until the call's page shows it awaiting review and
// returns the page's CSRF token.
func (w *webClient) awaitCall(session, callID string) string {
	w.t.Helper()
	var token string
	streamtest.Eventually(w.t, 30*time.Second, "call "+callID+" awaits review on the front page", func() bool {
		_, body := w.get("/")
		return strings.Contains(body, `data-call="`+callID+`"`)
	})
	_, body := w.get("/call?" + url.Values{"session": {session}, "call": {callID}}.Encode())
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		w.t.Fatalf("no CSRF token on the call page: %s", body)
	}
	token = m[1]
	return token
}

func reviewForm(token, session, callID, verdict string) url.Values {
	return url.Values{"csrf": {token}, "kind": {"review"}, "session": {session}, "call": {callID},
		"choice": {verdict}, "operator": {"alice@ops"}, "evidence": {"ledger query 42"}}
}

// TestConsoleUsage: a missing key or a non-loopback address without
// --allow-remote is a usage error, before anything connects.
func TestConsoleUsage(t *testing.T) {
	key := writeFile(t, "k.nk", "SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QKDU37FDXNJ4SHBVHV7ROXTI\n")
	for name, args := range map[string][]string{
		"no key":         {"console"},
		"bad key":        {"console", "--key", writeFile(t, "bad.nk", "x")},
		"remote listen":  {"console", "--key", key, "--listen", "0.0.0.0:8470"},
		"bad listen":     {"console", "--key", key, "--listen", "8470"},
		"stray argument": {"console", "--key", key, "extra"},
	} {
		t.Run(name, func(t *testing.T) {
			st, out, errOut := runCLI(args...)
			if st != exitUsage || out != "" || errOut == "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2, a message on stderr only", st, out, errOut)
			}
		})
	}
	if st, _, errOut := runCLI("console", "--key", key, "--listen", "0.0.0.0:8470"); !strings.Contains(errOut, "--allow-remote") {
		t.Fatalf("exit %d: the refusal of a remote address does not name --allow-remote: %s", st, errOut)
	}
}

// TestConsoleWeb drives the console over HTTP against `jingwei serve`
// (authorization on): an uncertain payment whose arguments carry HTML is
// listed, escaped; forged POSTs (no token, a wrong token, cross-origin, a
// foreign Host, an oversized body) are refused and publish nothing; a
// review signed with an untrusted key shows the recovery worker's refusal
// (invalid_review), not success; a trusted not_executed review lets the
// plan be prepared, and the page shows it.
func TestConsoleWeb(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	natsURL, _, _ := startServe(t, dir)
	base := startConsole(t, natsURL, dir, "")
	w := newWebClient(t, base)

	// The page itself: strict CSP, no inline script.
	resp, err := w.c.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("Content-Security-Policy %q, want script-src 'self' and nothing inline", csp)
	}

	const evil = `<script>alert("pwned")</script><img src=x onerror=alert(1)>`
	args, _ := json.Marshal(map[string]any{"account": evil, "amount_cents": 500})
	openPayment(t, natsURL, dir, "web-1", "c-web-1", string(args))
	token := w.awaitCall("web-1", "c-web-1")
	for _, path := range []string{"/", "/call?session=web-1&call=c-web-1", "/session?session=web-1"} {
		_, body := w.get(path)
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("%s renders the arguments' HTML unescaped:\n%s", path, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(") {
			t.Fatalf("%s does not show the arguments (escaped):\n%s", path, body)
		}
		if strings.Contains(body, "<script>") {
			t.Fatalf("%s has an inline script", path)
		}
	}

	reviews := func() uint64 {
		nc := connectRole(t, natsURL, dir, stream.RoleHost)
		defer nc.Close()
		js, _ := jetstream.New(nc)
		s, err := js.Stream(context.Background(), "JW_REVIEWS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	form := reviewForm(token, "web-1", "c-web-1", "not_executed")
	noToken := reviewForm("", "web-1", "c-web-1", "not_executed")
	noToken.Del("csrf")
	for name, tc := range map[string]struct {
		path string
		form url.Values
		hdr  map[string]string
		code int
	}{
		"no token":          {"/decide", noToken, nil, http.StatusForbidden},
		"wrong token":       {"/decide", reviewForm("AAAA"+token[4:], "web-1", "c-web-1", "not_executed"), nil, http.StatusForbidden},
		"cross-site":        {"/decide", form, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusForbidden},
		"cross origin":      {"/prepare", form, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}, http.StatusForbidden},
		"foreign host":      {"/decide", form, map[string]string{"Host": "evil.example:8470"}, http.StatusMisdirectedRequest},
		"oversized body":    {"/decide", url.Values{"csrf": {token}, "evidence": {strings.Repeat("x", 20<<10)}}, nil, http.StatusForbidden},
		"prepare no token":  {"/prepare", url.Values{"session": {"web-1"}, "call": {"c-web-1"}}, nil, http.StatusForbidden},
		"get is not a post": {"/decide", nil, map[string]string{"X-Get": "1"}, http.StatusMethodNotAllowed},
	} {
		t.Run(name, func(t *testing.T) {
			var code int
			if tc.hdr["X-Get"] != "" {
				code, _ = w.get(tc.path)
			} else if h := tc.hdr["Host"]; h != "" {
				req, _ := http.NewRequest(http.MethodPost, base+tc.path, strings.NewReader(tc.form.Encode()))
				req.Host = h
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := w.c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				code = resp.StatusCode
			} else {
				code, _ = w.post(tc.path, tc.form, tc.hdr)
			}
			if code != tc.code {
				t.Fatalf("status %d, want %d", code, tc.code)
			}
		})
	}
	// A token is bound to its browser: another cookie jar with the first
	// one's token is refused.
	other := newWebClient(t, base)
	other.get("/")
	if code, _ := other.post("/decide", form, nil); code != http.StatusForbidden {
		t.Fatalf("another browser's token: status %d, want 403", code)
	}
	if n := reviews(); n != 0 {
		t.Fatalf("%d reviews published by refused POSTs, want 0", n)
	}

	// A review signed with a key the recovery worker does not trust is
	// published (the audit trail) but ignored: the page says so with the
	// code, and asking for a plan is still refused.
	untrusted := startConsole(t, natsURL, dir, writeFile(t, "stranger.nk", newSeed(t)))
	u := newWebClient(t, untrusted)
	utoken := u.awaitCall("web-1", "c-web-1")
	code, body := u.post("/decide", reviewForm(utoken, "web-1", "c-web-1", "not_executed"), nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome refused"`) || !strings.Contains(body, "invalid_review") {
		t.Fatalf("untrusted review: status %d, want the refusal invalid_review on the page:\n%s", code, body)
	}
	if strings.Contains(body, "and accepted") {
		t.Fatalf("untrusted review shown as accepted:\n%s", body)
	}
	if !strings.Contains(body, "ignored: invalid_review") {
		t.Fatalf("the reviews on record do not show the ignored review:\n%s", body)
	}
	code, body = u.post("/prepare", url.Values{"csrf": {utoken}, "session": {"web-1"}, "call": {"c-web-1"}}, nil)
	if code != http.StatusOK || !strings.Contains(body, "needs_review") || !strings.Contains(body, "Retry plan refused") {
		t.Fatalf("prepare after an untrusted review: status %d, want the refusal needs_review:\n%s", code, body)
	}

	// Bad input of the console's own form: nothing published.
	before := reviews()
	code, body = w.post("/decide", reviewForm(token, "web-1", "c-web-1", "maybe"), nil)
	if code != http.StatusOK || !strings.Contains(body, "bad_request") {
		t.Fatalf("unknown verdict: status %d:\n%s", code, body)
	}
	if reviews() != before {
		t.Fatal("a review with an unknown verdict was published")
	}

	// The trusted key: accepted, and the plan is issued.
	code, body = w.post("/decide", form, nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome ok"`) || !strings.Contains(body, "accepted") {
		t.Fatalf("trusted review: status %d, want accepted:\n%s", code, body)
	}
	code, body = w.post("/prepare", url.Values{"csrf": {token}, "session": {"web-1"}, "call": {"c-web-1"}}, nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome ok"`) || !strings.Contains(body, "Retry plan ") || !strings.Contains(body, "not_executed by alice@ops") {
		t.Fatalf("prepare after a trusted review: status %d, want the plan:\n%s", code, body)
	}
	if _, b := other.get("/plans"); !strings.Contains(b, "web-1") {
		t.Fatalf("/plans does not list the plan:\n%s", b)
	}
	if _, b := other.get("/sessions"); !strings.Contains(b, "web-1") {
		t.Fatalf("/sessions does not list the session:\n%s", b)
	}
}

// newSeed returns a fresh nkey user seed.
func newSeed(t *testing.T) string {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return string(seed) + "\n"
}

// TestConsoleRoles: the console's two connections are the reviewer's and
// the host's, and are refused what those roles are refused: the reviewer
// connection cannot prepare a plan or write a session log, the host
// connection cannot publish a review or an assessment. stream.CheckRoles
// probes both roles' full tables with the same keys.
func TestConsoleRoles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	natsURL, _, _ := startServe(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := natsFlags{server: natsURL, auth: filepath.Join(dir, "auth"), prefix: "jw", connectTimeout: 10 * time.Second}
	rc, err := n.connectConsole(ctx, consoleConn{role: stream.RoleReviewer}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hc, err := n.connectConsole(ctx, consoleConn{role: stream.RoleHost}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()

	rjs, _ := jetstream.New(rc)
	hjs, _ := jetstream.New(hc)
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if _, err := rjs.Publish(pctx, "jw.events.roles-1", []byte(`{}`)); err == nil {
		t.Fatal("the console's reviewer connection wrote a session log")
	}
	if _, err := hjs.Publish(pctx, "jw.reviews.roles-1", []byte(`{}`)); err == nil {
		t.Fatal("the console's host connection published a review")
	}
	if _, err := hjs.Publish(pctx, "jw.assessments.roles-1", []byte(`{}`)); err == nil {
		t.Fatal("the console's host connection published an assessment")
	}
	if m, err := rc.Request("jw.api.prepare", []byte(`{"session":"roles-1","call_id":"c-1"}`), 2*time.Second); err == nil {
		t.Fatalf("the console's reviewer connection asked jw.api.prepare and got %s", m.Data)
	}
	rep, err := stream.CheckRoles(ctx, stream.CheckConfig{URL: natsURL, Dir: stream.KeyDir(filepath.Join(dir, "auth")), Roles: []stream.Role{stream.RoleReviewer, stream.RoleHost}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("role check of the console's roles failed: %+v", rep.Failures())
	}
}

// curlPost posts form as curl does: no Origin, no Sec-Fetch-Site, the
// cookies of jar (curl -b). It does not follow the redirect.
func curlPost(t *testing.T, c *http.Client, u string, form url.Values) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestConsoleCurlSecondCharge reproduces the second charge from any local
// process: with nothing but an HTTP client (no Origin, no Sec-Fetch-Site,
// no login), read the CSRF token off the call's page, sign not_executed
// for a payment that may have charged, and prepare the plan. The console
// must neither serve the page nor sign nor prepare: no review is
// published and no plan issued.
func TestConsoleCurlSecondCharge(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	natsURL, _, _ := startServe(t, dir)
	base := startConsole(t, natsURL, dir, "")
	openPayment(t, natsURL, dir, "curl-1", "c-curl-1", `{"account":"acct-1","amount_cents":700}`)
	waitAwaiting(t, natsURL, dir, "curl-1", "c-curl-1")

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(base + "/call?session=curl-1&call=c-curl-1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET the call's page without a login: status %d, want 401", resp.StatusCode)
	}
	token := ""
	if m := csrfRE.FindStringSubmatch(string(body)); m != nil {
		token = m[1]
		t.Errorf("the call's page served a CSRF token to a client without a login")
	}
	decide := curlPost(t, c, base+"/decide", url.Values{"csrf": {token}, "kind": {"review"}, "session": {"curl-1"}, "call": {"c-curl-1"},
		"choice": {"not_executed"}, "operator": {"mallory"}, "evidence": {"trust me"}})
	prepare := curlPost(t, c, base+"/prepare", url.Values{"csrf": {token}, "session": {"curl-1"}, "call": {"c-curl-1"}})
	if decide < 400 || prepare < 400 {
		t.Errorf("curl POST /decide: %d, POST /prepare: %d; want both refused", decide, prepare)
	}
	nc := connectRole(t, natsURL, dir, stream.RoleHost)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), "JW_REVIEWS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d reviews published for a client without a login, want 0", info.State.Msgs)
	}
	topo, err := stream.OpenTopology(context.Background(), js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	plans, err := topo.ListPlans(context.Background(), "curl-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 0 {
		t.Errorf("a plan was issued for a client without a login: %+v", plans[0].Plan)
	}
}

// waitAwaiting waits until jw.api.status lists the call awaiting review.
func waitAwaiting(t *testing.T, url, data, session, callID string) {
	t.Helper()
	nc := connectRole(t, url, data, stream.RoleReviewer)
	defer nc.Close()
	cl := service.NewClient(nc, service.ClientConfig{Timeout: 5 * time.Second})
	streamtest.Eventually(t, 30*time.Second, "call "+callID+" awaits review", func() bool {
		st, err := cl.Status(context.Background(), service.StatusRequest{Session: session})
		if err != nil {
			return false
		}
		for _, a := range st.AwaitingReview {
			if a.CallID == callID {
				return true
			}
		}
		return false
	})
}
