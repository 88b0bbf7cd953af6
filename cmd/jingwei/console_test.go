package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker/service"
)

var (
	consoleURLRE   = regexp.MustCompile(`jingwei console on (http://\S+)/ `)
	consoleLoginRE = regexp.MustCompile(`log in: (http://\S+)`)
	// consoleLogins is the login URL of each console a test started, by
	// its base URL (newWebClient logs in with it).
	consoleLogins sync.Map
)

// startConsole runs `jingwei console` against a serve on url with data
// directory data (its role keys) until the test ends; it returns the
// console's base URL.
func startConsole(t *testing.T, url, data string, extra ...string) string {
	t.Helper()
	base, _ := startConsoleLog(t, url, data, extra...)
	return base
}

// startConsoleLog is startConsole that also returns the console's stderr.
func startConsoleLog(t *testing.T, url, data string, extra ...string) (string, *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	args := append([]string{"console", "--server", url, "--auth", filepath.Join(data, "auth"),
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
	var base, login string
	streamtest.Eventually(t, 20*time.Second, "the console prints its URL and login URL", func() bool {
		select {
		case code := <-done:
			t.Fatalf("console exited %d: %s", code, errb.String())
		default:
		}
		m, l := consoleURLRE.FindStringSubmatch(out.String()), consoleLoginRE.FindStringSubmatch(out.String())
		if m != nil && l != nil {
			base, login = m[1], l[1]
			return true
		}
		return false
	})
	consoleLogins.Store(base, login)
	return base, &errb
}

// personKey returns a person's key: the seed file name in data ('jingwei
// serve' makes reviewer.nk, trusted by its recovery worker, and
// approver.nk, trusted by its tool worker and listed in auth/approvers).
func personKey(t *testing.T, data, name string) nkeys.KeyPair {
	t.Helper()
	kp, err := loadUserKey(filepath.Join(data, name))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// trustFile writes a trust file naming each key ("<key> <name>").
func trustFile(t *testing.T, file string, named map[string]nkeys.KeyPair) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# people\n")
	for name, kp := range named {
		pub, _ := kp.PublicKey()
		fmt.Fprintf(&b, "%s %s\n", pub, name)
	}
	return writeFile(t, file, b.String())
}

// openPayment records, as a tool worker that then died would have, a
// payments.charge call (non-idempotent) whose body started and that has no
// result; the writer's lease is left to expire (serve runs with
// --lease-ttl 1s), so the recovery worker fences the session and assesses
// the call uncertain: needs_review.
func openPayment(t *testing.T, url, data, session, callID, args string) {
	t.Helper()
	ctx := context.Background()
	nc := connectRole(t, url, data, access.RoleWorker)
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := topo.Leases().AcquireLease(ctx, session, "crashed-writer-"+session)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Logs().Fence(ctx, session, "crashed-writer-"+session, lease.Epoch)
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

// newWebClient returns a browser stand-in logged in to the console at
// base (with the login URL the console printed).
func newWebClient(t *testing.T, base string) *webClient {
	t.Helper()
	w := newAnonClient(t, base)
	login, ok := consoleLogins.Load(base)
	if !ok {
		t.Fatalf("no login URL for the console at %s", base)
	}
	resp, err := w.c.Get(login.(string))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login at %s: status %d after the redirect, want 200", login, resp.StatusCode)
	}
	return w
}

// newAnonClient returns a browser stand-in that has not logged in.
func newAnonClient(t *testing.T, base string) *webClient {
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

// reviewForm is the form the console's page posts once the person's
// browser signed the review with kp (the key the person holds; the
// console holds none).
func reviewForm(t *testing.T, kp nkeys.KeyPair, token, session, callID, verdict string) url.Values {
	t.Helper()
	rv, err := recovery.SignReview(kp, schema.Review{V: schema.Version, Session: session, CallID: callID, Operator: "alice@ops",
		Evidence: "ledger query 42", Verdict: schema.Verdict(verdict), At: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rv)
	return url.Values{"csrf": {token}, "kind": {"review"}, "session": {session}, "call": {callID}, "signed": {string(b)}}
}

// TestConsoleUsage: a key for the console (it holds none), a
// non-loopback address without --allow-remote, a bad trust file or a short
// token are usage errors, before anything connects.
func TestConsoleUsage(t *testing.T) {
	key := writeFile(t, "k.nk", "SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QKDU37FDXNJ4SHBVHV7ROXTI\n")
	for name, args := range map[string][]string{
		"a key":           {"console", "--key", key},
		"an approver key": {"console", "--approver-key", key},
		"remote listen":   {"console", "--listen", "0.0.0.0:8470"},
		"bad listen":      {"console", "--listen", "8470"},
		"stray argument":  {"console", "extra"},
		"bad trust file":  {"console", "--trust-reviewers", writeFile(t, "bad-trust", "alice UNOTAKEY\n")},
		"no trust file":   {"console", "--trust-reviewers", filepath.Join(t.TempDir(), "missing")},
		"short token":     {"console", "--token-file", writeFile(t, "token", "short\n")},
	} {
		t.Run(name, func(t *testing.T) {
			st, out, errOut := runCLI(args...)
			if st != exitUsage || out != "" || errOut == "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2, a message on stderr only", st, out, errOut)
			}
		})
	}
	if st, _, errOut := runCLI("console", "--listen", "0.0.0.0:8470"); !strings.Contains(errOut, "--allow-remote") {
		t.Fatalf("exit %d: the refusal of a remote address does not name --allow-remote: %s", st, errOut)
	}
	if _, _, errOut := runCLI("console", "--key", key); !strings.Contains(errOut, "holds no signing key") {
		t.Fatalf("the refusal of --key does not say the console holds no key: %s", errOut)
	}
}

// TestConsoleWeb drives the console over HTTP against `jingwei serve`
// (authorization on), as curl or a script would: every page needs the
// login; an uncertain payment whose arguments carry HTML is listed,
// escaped; forged POSTs (no login, no token, a wrong token, cross-origin,
// neither Origin nor Sec-Fetch-Site, a foreign Host, an oversized body)
// are refused and publish nothing; the console signs nothing: an unsigned
// form, a forged signature, a signature by a key outside the trusted
// reviewers are refused before anything is published; a console that does
// not know the trusted keys relays a stranger's review and shows the
// recovery worker's refusal (invalid_review); alice's not_executed review
// is accepted, shown with her name from the trust file, and lets the plan
// be prepared. Every review on JW_REVIEWS is signed by a key the test
// holds.
func TestConsoleWeb(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	natsURL, _, _ := startServe(t, dir, "--no-prober")
	alice := personKey(t, dir, reviewerKeyFile)
	apub, _ := alice.PublicKey()
	stranger, _ := nkeys.CreateUser()
	spub, _ := stranger.PublicKey()
	trust := trustFile(t, "reviewers", map[string]nkeys.KeyPair{"Alice Liddell": alice})
	base := startConsole(t, natsURL, dir, "--trust-reviewers", trust)
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
	anon := newAnonClient(t, base)
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
		if code, body := anon.get(path); code != http.StatusUnauthorized || strings.Contains(body, "web-1") {
			t.Fatalf("%s without a login: status %d, want 401 and nothing of the session", path, code)
		}
	}

	reviews := func() []schema.Review {
		nc := connectRole(t, natsURL, dir, access.RoleHost)
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
		var out []schema.Review
		for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(context.Background(), seq)
			if err != nil {
				continue
			}
			rv, err := schema.DecodeReview(m.Data)
			if err != nil {
				t.Fatalf("JW_REVIEWS seq %d: %v", seq, err)
			}
			out = append(out, rv)
		}
		return out
	}
	form := reviewForm(t, alice, token, "web-1", "c-web-1", "not_executed")
	prepareForm := url.Values{"csrf": {token}, "session": {"web-1"}, "call": {"c-web-1"}}
	noToken := reviewForm(t, alice, "", "web-1", "c-web-1", "not_executed")
	noToken.Del("csrf")
	for name, tc := range map[string]struct {
		client *webClient
		path   string
		form   url.Values
		hdr    map[string]string
		code   int
	}{
		"no login":               {anon, "/decide", form, nil, http.StatusUnauthorized},
		"no login prepare":       {anon, "/prepare", prepareForm, nil, http.StatusUnauthorized},
		"no token":               {w, "/decide", noToken, nil, http.StatusForbidden},
		"wrong token":            {w, "/decide", reviewForm(t, alice, "AAAA"+token[4:], "web-1", "c-web-1", "not_executed"), nil, http.StatusForbidden},
		"cross-site":             {w, "/decide", form, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusForbidden},
		"cross origin":           {w, "/prepare", prepareForm, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}, http.StatusForbidden},
		"no origin headers":      {w, "/decide", form, map[string]string{"Sec-Fetch-Site": "", "Origin": ""}, http.StatusForbidden},
		"no origin headers plan": {w, "/prepare", prepareForm, map[string]string{"Sec-Fetch-Site": "", "Origin": ""}, http.StatusForbidden},
		"foreign host":           {w, "/decide", form, map[string]string{"Host": "evil.example:8470"}, http.StatusMisdirectedRequest},
		"oversized body":         {w, "/decide", url.Values{"csrf": {token}, "evidence": {strings.Repeat("x", 20<<10)}}, nil, http.StatusForbidden},
		"prepare no token":       {w, "/prepare", url.Values{"session": {"web-1"}, "call": {"c-web-1"}}, nil, http.StatusForbidden},
		"get is not a post":      {w, "/decide", nil, map[string]string{"X-Get": "1"}, http.StatusMethodNotAllowed},
	} {
		t.Run(name, func(t *testing.T) {
			var code int
			if tc.hdr["X-Get"] != "" {
				code, _ = tc.client.get(tc.path)
			} else if h := tc.hdr["Host"]; h != "" {
				req, _ := http.NewRequest(http.MethodPost, base+tc.path, strings.NewReader(tc.form.Encode()))
				req.Host = h
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := tc.client.c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				code = resp.StatusCode
			} else {
				code, _ = tc.client.post(tc.path, tc.form, tc.hdr)
			}
			if code != tc.code {
				t.Fatalf("status %d, want %d", code, tc.code)
			}
		})
	}
	// A token is bound to its login: another login with the first one's
	// token is refused.
	other := newWebClient(t, base)
	if code, _ := other.post("/decide", form, nil); code != http.StatusForbidden {
		t.Fatalf("another login's token: status %d, want 403", code)
	}
	if n := len(reviews()); n != 0 {
		t.Fatalf("%d reviews published by refused POSTs, want 0", n)
	}

	// The console signs nothing: what the person did not sign is refused
	// before anything is published.
	unsigned := reviewForm(t, alice, token, "web-1", "c-web-1", "not_executed")
	unsigned.Del("signed")
	var forged schema.Review
	_ = json.Unmarshal([]byte(form.Get("signed")), &forged)
	forged.Verdict = schema.VerdictCompleted
	fb, _ := json.Marshal(forged)
	claimed := reviewForm(t, stranger, token, "web-1", "c-web-1", "not_executed")
	var cl schema.Review
	_ = json.Unmarshal([]byte(claimed.Get("signed")), &cl)
	cl.Signer = apub // the stranger's signature under alice's key
	cb, _ := json.Marshal(cl)
	for name, tc := range map[string]struct {
		form url.Values
		want string
	}{
		"unsigned":       {unsigned, "not signed"},
		"forged":         {url.Values{"csrf": {token}, "kind": {"review"}, "session": {"web-1"}, "call": {"c-web-1"}, "signed": {string(fb)}}, "does not verify"},
		"claimed signer": {url.Values{"csrf": {token}, "kind": {"review"}, "session": {"web-1"}, "call": {"c-web-1"}, "signed": {string(cb)}}, "does not verify"},
		"stranger":       {reviewForm(t, stranger, token, "web-1", "c-web-1", "not_executed"), "not a trusted reviewer key"},
		"another call":   {reviewForm(t, alice, token, "web-1", "c-other", "not_executed"), "not this call"},
		"bad verdict":    {reviewForm(t, alice, token, "web-1", "c-web-1", "maybe"), "invalid_review"},
	} {
		if name == "another call" {
			tc.form.Set("call", "c-web-1")
		}
		code, body := w.post("/decide", tc.form, nil)
		if code != http.StatusOK || !strings.Contains(body, `class="outcome refused"`) || !strings.Contains(body, "nothing published") || !strings.Contains(body, tc.want) {
			t.Fatalf("%s review: status %d, want refused before publishing (%s):\n%s", name, code, tc.want, body)
		}
	}
	if n := len(reviews()); n != 0 {
		t.Fatalf("%d reviews published that no trusted person signed, want 0", n)
	}
	if code, body := w.post("/prepare", prepareForm, nil); code != http.StatusOK || !strings.Contains(body, "needs_review") || !strings.Contains(body, "Retry plan refused") {
		t.Fatalf("prepare without a review: status %d, want the refusal needs_review:\n%s", code, body)
	}

	// A console that does not know the trusted keys relays a stranger's
	// well-signed review; the recovery worker ignores it and the page says
	// so with the code.
	unknown := startConsole(t, natsURL, dir)
	u := newWebClient(t, unknown)
	utoken := u.awaitCall("web-1", "c-web-1")
	code, body := u.post("/decide", reviewForm(t, stranger, utoken, "web-1", "c-web-1", "not_executed"), nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome refused"`) || !strings.Contains(body, "invalid_review") || strings.Contains(body, "and accepted") {
		t.Fatalf("untrusted review: status %d, want the recovery worker's refusal invalid_review on the page:\n%s", code, body)
	}
	if !strings.Contains(body, "ignored: invalid_review") {
		t.Fatalf("the reviews on record do not show the ignored review:\n%s", body)
	}

	// Alice's key: accepted, shown with her name; the plan is issued.
	code, body = w.post("/decide", form, nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome ok"`) || !strings.Contains(body, "by Alice Liddell") || !strings.Contains(body, "accepted") {
		t.Fatalf("alice's review: status %d, want accepted, by Alice Liddell:\n%s", code, body)
	}
	if !regexp.MustCompile(`<td class="signer"><strong>Alice Liddell</strong>`).MatchString(body) || !regexp.MustCompile(`<td class="signer"><strong>untrusted key</strong>`).MatchString(body) {
		t.Fatalf("the reviews on record do not name their signers (Alice Liddell, an untrusted key):\n%s", body)
	}
	code, body = w.post("/prepare", prepareForm, nil)
	if code != http.StatusOK || !strings.Contains(body, `class="outcome ok"`) || !strings.Contains(body, "Retry plan ") || !strings.Contains(body, "not_executed signed by Alice Liddell") {
		t.Fatalf("prepare after alice's review: status %d, want the plan:\n%s", code, body)
	}
	if _, b := other.get("/plans"); !strings.Contains(b, "web-1") {
		t.Fatalf("/plans does not list the plan:\n%s", b)
	}
	if _, b := other.get("/sessions"); !strings.Contains(b, "web-1") {
		t.Fatalf("/sessions does not list the session:\n%s", b)
	}
	// The console never signs: every review on record is alice's or the
	// stranger's, the keys the test holds.
	for _, rv := range reviews() {
		if rv.Signer != apub && rv.Signer != spub {
			t.Fatalf("a review on JW_REVIEWS signed by %s, a key the test does not hold", rv.Signer)
		}
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
	natsURL, _, _ := startServe(t, dir, "--no-prober")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := natsFlags{server: natsURL, auth: filepath.Join(dir, "auth"), prefix: "jw", connectTimeout: 10 * time.Second}
	rc, err := n.connectConsole(ctx, consoleConn{role: access.RoleReviewer}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hc, err := n.connectConsole(ctx, consoleConn{role: access.RoleHost}, zerolog.Nop())
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
	rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: natsURL, Dir: access.KeyDir(filepath.Join(dir, "auth")), Roles: []access.Role{access.RoleReviewer, access.RoleHost}})
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
	natsURL, _, _ := startServe(t, dir, "--no-prober")
	base := startConsole(t, natsURL, dir)
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
	nc := connectRole(t, natsURL, dir, access.RoleHost)
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
	plans, err := topo.Plans().ListPlans(context.Background(), "curl-1")
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
	nc := connectRole(t, url, data, access.RoleReviewer)
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
