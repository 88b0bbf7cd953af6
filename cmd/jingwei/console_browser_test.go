package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
)

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium for the test (a fresh profile) and
// returns its context. Without Chromium the test skips, or fails when
// JINGWEI_REQUIRE_BROWSER=1 (CI sets it: the browser test must not skip
// silently there).
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("JINGWEI_CHROMIUM")
	if path == "" {
		path = chromiumPath
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("JINGWEI_REQUIRE_BROWSER") == "1" {
			t.Fatalf("JINGWEI_REQUIRE_BROWSER=1 but there is no Chromium at %s (apt-get install -y chromium): %v", path, err)
		}
		t.Skipf("no Chromium at %s (apt-get install -y chromium, or set JINGWEI_CHROMIUM); the console's browser test is skipped", path)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, tcancel := context.WithTimeout(ctx, 240*time.Second)
	t.Cleanup(tcancel)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// screenshot saves the page as docs/img/<name>.png when
// JINGWEI_SCREENSHOTS=1 (to refresh the README's images), else in the
// test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	// Quality 100 is a PNG (below, a JPEG).
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := t.TempDir()
	if os.Getenv("JINGWEI_SCREENSHOTS") == "1" {
		dir = filepath.Join("..", "..", "docs", "img")
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// textOf returns the text of the first element sel matches.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	for try := 1; ; try++ {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		// The page's live updates may replace the node between the query
		// and the read (Chromium: "No node with given id found"): query it
		// again.
		if err != nil && strings.Contains(err.Error(), "No node with given id") && try < 5 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
}

// do runs steps, failing the test with what it was doing.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	start := time.Now()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

// person is someone with a key: the seed they import in the browser and
// its public key.
type person struct{ name, seed, pub string }

func newPerson(t *testing.T, name string) person {
	t.Helper()
	seed := strings.TrimSpace(newSeed(t))
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return person{name, seed, pub}
}

// loginBrowser opens the console's login URL in the browser (it sets the
// cookie and lands on the front page).
func loginBrowser(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	login, ok := consoleLogins.Load(base)
	if !ok {
		t.Fatalf("no login URL for %s", base)
	}
	do(t, ctx, "log in", chromedp.Navigate(login.(string)), chromedp.WaitVisible(chromedp.CSS("#live-state.up")))
}

// useKey forgets the browser's key, if any, and imports p's seed as a
// person would paste it; the panel then shows p's public key and name.
func useKey(t *testing.T, ctx context.Context, p person) {
	t.Helper()
	forgetKey(t, ctx)
	do(t, ctx, "import "+p.name+"'s seed",
		chromedp.SendKeys(chromedp.CSS("#key-seed"), p.seed),
		chromedp.Click(chromedp.CSS("#key-import")),
		chromedp.WaitVisible(chromedp.CSS("#mykey-have")))
	if got := textOf(t, ctx, "#my-pub"); got != p.pub {
		t.Fatalf("the browser's key after importing %s's seed is %q, want %s", p.name, got, p.pub)
	}
	if got := textOf(t, ctx, "#my-name"); got != p.name {
		t.Fatalf("the panel names the key %q, want %q", got, p.name)
	}
}

// forgetKey drops the browser's key, if it holds one.
func forgetKey(t *testing.T, ctx context.Context) {
	t.Helper()
	// The panel shows the stored key once it has read it (data-ready).
	do(t, ctx, "the key panel is ready", chromedp.WaitReady(chromedp.CSS("#mykey[data-ready]")))
	has, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!document.getElementById("mykey-have").hidden`))
	if err != nil {
		t.Fatal(err)
	}
	if has {
		do(t, ctx, "forget the key", chromedp.Click(chromedp.CSS("#key-forget")), chromedp.WaitVisible(chromedp.CSS("#mykey-none")))
	}
}

// TestConsoleBrowser drives the console in headless Chromium against
// `jingwei serve` (authorization on, a real tool worker and recovery
// worker, two trusted reviewers named in the trust file). The console
// holds no key: each person signs in the browser with their own. An
// uncertain payment appears on the open page without a reload; alice
// imports her seed and signs completed (accepted, shown as hers) and
// asking for a plan shows the refusal (completed); for a second payment a
// key made in the browser, which no one trusts, is refused with a visible
// reason and nothing is published; bob imports his seed, signs
// not_executed (accepted, shown as his), asks for the plan, the page
// shows it, and the tool worker runs the retry once: exactly one charge.
func TestConsoleBrowser(t *testing.T) {
	ctx := browser(t)
	dir := filepath.Join(t.TempDir(), "data")
	alice, bob := newPerson(t, "alice"), newPerson(t, "bob")
	trust := writeFile(t, "reviewers", "# people who review\n"+alice.pub+" alice\n"+bob.pub+" bob\n")
	natsURL, _, _ := startServe(t, dir, "--no-prober", "--trust-reviewers", trust)
	base := startConsole(t, natsURL, dir, "--trust-reviewers", trust)

	// Without the login, nothing.
	do(t, ctx, "open the console without logging in", chromedp.Navigate(base+"/"), chromedp.WaitReady(chromedp.CSS("body")))
	if s := textOf(t, ctx, "body"); !strings.Contains(s, "login required") {
		t.Fatalf("the console without a login: %q, want login required", s)
	}
	loginBrowser(t, ctx, base)
	do(t, ctx, "mark the page", chromedp.WaitVisible(chromedp.CSS("#mykey-none")), chromedp.Evaluate[chromedp.Void](`window.jwNoReload = 42`))

	// 1. An uncertain payment appears without a reload.
	openPayment(t, natsURL, dir, "pay-1", "c-pay-1", `{"account":"acct-7","amount_cents":1250}`)
	do(t, ctx, "wait for the first payment on the page", chromedp.WaitVisible(chromedp.CSS(`article[data-call="c-pay-1"]`)))
	if v, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.jwNoReload || 0`)); err != nil || v != 42 {
		t.Fatalf("the page was reloaded to show the call (marker %d, %v)", v, err)
	}
	if s := textOf(t, ctx, `article[data-call="c-pay-1"]`); !strings.Contains(s, "needs_review") || !strings.Contains(s, "payments.charge") || !strings.Contains(s, "acct-7") {
		t.Fatalf("the call's card lacks its assessment or arguments: %s", s)
	}
	screenshot(t, ctx, "console-awaiting")

	// 2. Alice signs completed with her own key; the plan is refused.
	do(t, ctx, "open the first payment",
		chromedp.Click(chromedp.CSS(`article[data-call="c-pay-1"] a.button`)),
		chromedp.WaitVisible(chromedp.CSS("form.decide")))
	useKey(t, ctx, alice)
	if s := textOf(t, ctx, "#my-trust"); !strings.Contains(s, "a trusted reviewer") {
		t.Fatalf("alice's key is not shown trusted: %q", s)
	}
	do(t, ctx, "alice signs completed",
		chromedp.Click(chromedp.CSS(`input[name=choice][value=completed]`)),
		// Text the canonical form must carry exactly: quotes, markup,
		// non-ASCII.
		chromedp.SendKeys(chromedp.CSS(`input[name=evidence]`), `ledger "shows" charge 1250 for acct-7 — <ok> é ✓`),
		chromedp.Click(chromedp.CSS("#sign")),
		chromedp.WaitVisible(chromedp.CSS("#outcome")))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "accepted") || !strings.Contains(s, "by alice") {
		t.Fatalf("alice signing completed: outcome %q, want accepted, by alice", s)
	}
	if s := textOf(t, ctx, "table.reviews"); !strings.Contains(s, "alice") || !strings.Contains(s, `ledger "shows" charge 1250 for acct-7 — <ok> é ✓`) {
		t.Fatalf("the review on record does not name alice or lost its evidence: %q", s)
	}
	do(t, ctx, "ask for a plan", chromedp.Click(chromedp.CSS("#prepare")), chromedp.WaitVisible(chromedp.CSS("#outcome.refused")))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "completed") || !strings.Contains(s, "refused") {
		t.Fatalf("plan after completed: outcome %q, want the refusal completed", s)
	}
	// The verdict is final: shown so, no needs_review, no form to sign.
	do(t, ctx, "the completed call's page", chromedp.Navigate(base+"/call?session=pay-1&call=c-pay-1"), chromedp.WaitVisible(chromedp.CSS("#call-detail .badge.final")))
	if s := textOf(t, ctx, "#call-detail"); strings.Contains(s, "needs_review") || !strings.Contains(s, "final") {
		t.Fatalf("after a completed verdict the call's page says: %q", s)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("form.decide").length`)); err != nil || n != 0 {
		t.Fatalf("after a completed verdict: %d sign forms (%v), want none", n, err)
	}
	screenshot(t, ctx, "console-refused")

	// 3. A second payment. A key made in this browser is no one's the
	// recovery worker trusts: refused, with the reason on the page.
	do(t, ctx, "back to the list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#live-state.up")))
	openPayment(t, natsURL, dir, "pay-2", "c-pay-2", `{"account":"acct-9","amount_cents":990}`)
	do(t, ctx, "open the second payment",
		chromedp.WaitVisible(chromedp.CSS(`article[data-call="c-pay-2"]`)),
		chromedp.Click(chromedp.CSS(`article[data-call="c-pay-2"] a.button`)),
		chromedp.WaitVisible(chromedp.CSS("form.decide")))
	// The call has no result of its own (no_result): its writer may still
	// run, and the page says what to do before signing not_executed.
	if s := textOf(t, ctx, "#writer-may-run"); !strings.Contains(s, "MAY STILL BE RUNNING") || !strings.Contains(s, "FenceLedger") || !strings.Contains(s, "Then check") {
		t.Fatalf("the call page does not say the writer may run and to fence first: %q", s)
	}
	forgetKey(t, ctx)
	do(t, ctx, "make a key in the browser", chromedp.Click(chromedp.CSS("#key-new")), chromedp.WaitVisible(chromedp.CSS("#mykey-have")))
	made := textOf(t, ctx, "#my-pub")
	if !nkeys.IsValidPublicUserKey(made) || made == alice.pub || made == bob.pub {
		t.Fatalf("the key made in the browser is %q, want a new nkey user public key", made)
	}
	if s := textOf(t, ctx, "#my-trust"); !strings.Contains(s, "NOT a trusted reviewer") || !strings.Contains(s, made) {
		t.Fatalf("the browser's own key is not shown untrusted with its trust line: %q", s)
	}
	if ext, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`new Promise(function (res) { var r = indexedDB.open("jingwei-console"); r.onsuccess = function () { var g = r.result.transaction("keys").objectStore("keys").get("me"); g.onsuccess = function () { res(g.result.priv.extractable); }; }; })`, chromedp.EvalAwaitPromise)); err != nil || ext {
		t.Fatalf("the key made in the browser is extractable (%v, %v)", ext, err)
	}
	do(t, ctx, "sign with the untrusted key",
		chromedp.Click(chromedp.CSS(`input[name=choice][value=not_executed]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=operator]`), "mallory"),
		chromedp.SendKeys(chromedp.CSS(`input[name=evidence]`), "trust me"),
		chromedp.Click(chromedp.CSS("#sign")),
		chromedp.WaitVisible(chromedp.CSS("#outcome.refused")))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "nothing published") || !strings.Contains(s, "not a trusted reviewer key") || !strings.Contains(s, made) {
		t.Fatalf("the untrusted browser key's review: outcome %q, want refused, not a trusted reviewer key", s)
	}
	screenshot(t, ctx, "console-untrusted")

	// Bob signs not_executed with his key; the plan; one retry.
	do(t, ctx, "the call's page again", chromedp.Navigate(base+"/call?session=pay-2&call=c-pay-2"), chromedp.WaitVisible(chromedp.CSS("form.decide")))
	useKey(t, ctx, bob)
	if s := textOf(t, ctx, "#my-trust"); !strings.Contains(s, "a trusted reviewer") || strings.Contains(s, "NOT") {
		t.Fatalf("bob's key is not shown trusted: %q", s)
	}
	screenshot(t, ctx, "console-call")
	do(t, ctx, "bob signs not_executed",
		chromedp.Click(chromedp.CSS(`input[name=choice][value=not_executed]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=evidence]`), "no charge for acct-9 in the ledger"),
		chromedp.Click(chromedp.CSS("#sign")),
		chromedp.WaitVisible(chromedp.CSS("#outcome.ok")))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "by bob") {
		t.Fatalf("bob's review: outcome %q, want accepted, by bob", s)
	}
	if s := textOf(t, ctx, "table.reviews"); !strings.Contains(s, "bob") || strings.Contains(s, "mallory") {
		t.Fatalf("the reviews on record of pay-2: %q, want bob's only", s)
	}
	do(t, ctx, "ask for the plan",
		chromedp.Click(chromedp.CSS("#prepare")),
		chromedp.WaitVisible(chromedp.CSS("#outcome.ok dl.plan")))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "Retry plan") || !strings.Contains(s, "not_executed signed by bob") {
		t.Fatalf("plan after not_executed: outcome %q, want the plan, signed by bob", s)
	}
	screenshot(t, ctx, "console-plan")

	// The tool worker runs the retry once: one charge, for pay-2 only.
	nc := connectRole(t, natsURL, dir, access.RoleWorker)
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := tools.New(context.Background(), tools.Config{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	charges := func() map[string]int {
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
	streamtest.Eventually(t, 30*time.Second, "the retry of c-pay-2 charges once", func() bool { return charges()["pay-2"] == 1 })
	// The retry's result shows in the chain, live, and the plan is consumed.
	do(t, ctx, "the retry's result on the call page", chromedp.WaitVisible(chromedp.CSS(`#call-detail tr.ev.ok`)))
	do(t, ctx, "the plans page", chromedp.Navigate(base+"/plans"), chromedp.WaitVisible(chromedp.CSS(`tr.consumed`)))
	if s := textOf(t, ctx, "table.plans"); !strings.Contains(s, "not_executed by bob") {
		t.Fatalf("the plans page does not name bob as the plan's reviewer: %q", s)
	}
	screenshot(t, ctx, "console-plans")
	do(t, ctx, "the session page", chromedp.Navigate(base+"/session?session=pay-2"), chromedp.WaitVisible(chromedp.CSS(`tr.ev.ok`)))
	screenshot(t, ctx, "console-session")
	// The first call's page still shows alice's verdict by name.
	do(t, ctx, "the first payment's page", chromedp.Navigate(base+"/call?session=pay-1&call=c-pay-1"), chromedp.WaitVisible(chromedp.CSS("table.reviews")))
	if s := textOf(t, ctx, "table.reviews td.signer"); !strings.Contains(s, "alice") {
		t.Fatalf("pay-1's review is not shown as alice's: %q", s)
	}
	// Arguments are the agent's: markup in them is shown, never run.
	do(t, ctx, "back to the list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#live-state.up")))
	openPayment(t, natsURL, dir, "pay-x", "c-pay-x", `{"account":"<img src=x onerror=\"window.jwPwned=1\"><script>window.jwPwned=2</script>","amount_cents":1}`)
	do(t, ctx, "wait for the hostile payment", chromedp.WaitVisible(chromedp.CSS(`article[data-call="c-pay-x"]`)))
	if v, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.jwPwned || 0`)); err != nil || v != 0 {
		t.Fatalf("markup in the arguments ran in the page (jwPwned %d, %v)", v, err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('article[data-call="c-pay-x"] img, main script').length`)); err != nil || n != 0 {
		t.Fatalf("markup in the arguments became %d elements (%v)", n, err)
	}
	if s := textOf(t, ctx, `article[data-call="c-pay-x"] pre.args`); !strings.Contains(s, "<img src=x") || !strings.Contains(s, "<script>") {
		t.Fatalf("the hostile arguments are not shown as text: %q", s)
	}
	if n := charges(); n["pay-2"] != 1 || n["pay-1"] != 0 {
		t.Fatalf("ledger charges by session %v, want pay-2:1 and none for pay-1 (completed)", n)
	}

	// A long queue: each card says how long it has waited; search and
	// pages narrow the list.
	openPayment(t, natsURL, dir, "pay-y", "c-pay-y", `{"account":"acct-9","amount_cents":2}`)
	do(t, ctx, "wait for the second waiting payment", chromedp.WaitVisible(chromedp.CSS(`article[data-call="c-pay-y"]`)))
	if s := textOf(t, ctx, `article[data-call="c-pay-y"] .waited`); !strings.HasPrefix(s, "waiting ") {
		t.Fatalf("the card does not say how long it has waited: %q", s)
	}
	do(t, ctx, "search for pay-y", chromedp.SendKeys(chromedp.CSS(`#filter input[name=q]`), "pay-y"), chromedp.Submit(chromedp.CSS(`#filter`)),
		chromedp.WaitNotPresent(chromedp.CSS(`article[data-call="c-pay-x"]`)), chromedp.WaitVisible(chromedp.CSS(`article[data-call="c-pay-y"]`)))
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("article[data-call]").length`)); err != nil || n != 1 {
		t.Fatalf("search pay-y: %d cards (%v), want 1", n, err)
	}
	do(t, ctx, "search by status", chromedp.Navigate(base+"/?q=NEEDS_REVIEW"), chromedp.WaitVisible(chromedp.CSS(`article[data-call="c-pay-x"]`)), chromedp.WaitVisible(chromedp.CSS(`article[data-call="c-pay-y"]`)))
	do(t, ctx, "one call a page", chromedp.Navigate(base+"/?per=1"), chromedp.WaitVisible(chromedp.CSS(`nav.pager[data-list=reviews] a.next`)))
	first := textOf(t, ctx, "article[data-call] h2")
	if s := textOf(t, ctx, `nav.pager[data-list=reviews]`); !strings.Contains(s, "page 1 of 2") {
		t.Fatalf("pager: %q", s)
	}
	do(t, ctx, "the next page", chromedp.Click(chromedp.CSS(`nav.pager[data-list=reviews] a.next`)), chromedp.WaitVisible(chromedp.CSS(`nav.pager[data-list=reviews] a.prev`)))
	if second := textOf(t, ctx, "article[data-call] h2"); second == first || !strings.Contains(textOf(t, ctx, `nav.pager[data-list=reviews]`), "page 2 of 2") {
		t.Fatalf("page 2 shows %q after %q", second, first)
	}
	screenshot(t, ctx, "console-paging")
}

// TestConsoleBrowserApproval drives the approvals part of the console in
// headless Chromium against `jingwei serve --require-approval`: a payment
// that requires approval appears in the pending list without a reload;
// carol imports her seed (serve's approver key, which serve's tool worker
// trusts) and approves it in the form, signed in the browser and the page shows
// approval.granted, then the body's result, live; the ledger holds exactly
// one charge. A second payment is denied: it ends rejected at stage
// approval, never charged. A stopped task shows on the stopped-tasks page.
func TestConsoleBrowserApproval(t *testing.T) {
	ctx := browser(t)
	dir := filepath.Join(t.TempDir(), "data")
	natsURL, _, _ := startServe(t, dir, "--require-approval", "payments.charge:amount_cents>1000")
	// Carol holds serve's approver key (the tool worker trusts it); the
	// console's approvers file names her.
	seed, err := os.ReadFile(filepath.Join(dir, approverKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	carol := person{"carol", string(bytes.TrimSpace(seed)), pub}
	base := startConsole(t, natsURL, dir, "--trust-approvers", writeFile(t, "approvers", carol.pub+" carol\n"))

	loginBrowser(t, ctx, base)
	useKey(t, ctx, carol)
	do(t, ctx, "mark the page", chromedp.Evaluate[chromedp.Void](`window.jwNoReload = 42`))
	requestCall(t, natsURL, dir, "buy-1", "r-1", tools.PaymentsCharge, `{"account":"acct-42","amount_cents":480000}`)
	call := waitingCall(t, natsURL, dir, "buy-1")
	sel := `article[data-approval="` + call + `"]`
	do(t, ctx, "wait for the payment in the pending list", chromedp.WaitVisible(chromedp.CSS(sel)))
	if s := textOf(t, ctx, sel+" .waited"); !strings.HasPrefix(s, "waiting ") {
		t.Fatalf("the pending approval does not say how long it has waited: %q", s)
	}
	if v, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.jwNoReload || 0`)); err != nil || v != 42 {
		t.Fatalf("the page was reloaded to show the pending approval (marker %d, %v)", v, err)
	}
	if s := textOf(t, ctx, sel); !strings.Contains(s, "payments.charge") || !strings.Contains(s, "acct-42") || !strings.Contains(s, "approval.requested") || !strings.Contains(s, "deadline") {
		t.Fatalf("the pending approval lacks its tool, arguments, deadline or events: %s", s)
	}
	screenshot(t, ctx, "console-approvals")

	do(t, ctx, "approve",
		chromedp.Click(chromedp.CSS(sel+" a.button")),
		chromedp.WaitVisible(chromedp.CSS("form.decide.approval")),
		chromedp.Click(chromedp.CSS(`input[name=choice][value=approved]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=operator]`), "carol@finance"),
		chromedp.SendKeys(chromedp.CSS(`input[name=evidence]`), "invoice INV-42 checked"),
		chromedp.Click(chromedp.CSS("#sign-approval")),
		chromedp.WaitVisible(chromedp.CSS("#outcome.ok")))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "approval.granted") || !strings.Contains(s, "by carol") {
		t.Fatalf("approving: outcome %q, want approval.granted", s)
	}
	streamtest.Eventually(t, 30*time.Second, "the approved payment charges once", func() bool { return ledgerCharges(t, natsURL, dir)["buy-1"] == 1 })
	do(t, ctx, "the body's result on the call page, live", chromedp.WaitVisible(chromedp.CSS(`#call-detail tr.ev.ok`)))
	if s := textOf(t, ctx, "#call-detail table.approvals"); !strings.Contains(s, "carol@finance") || !strings.Contains(s, "invoice INV-42 checked") || !strings.Contains(textOf(t, ctx, "#call-detail table.approvals td.signer"), "carol") {
		t.Fatalf("the approval on record: %q", s)
	}
	screenshot(t, ctx, "console-approved")

	// A denial: rejected at stage approval, the body never runs.
	do(t, ctx, "back to the list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#live-state.up")))
	requestCall(t, natsURL, dir, "buy-2", "r-1", tools.PaymentsCharge, `{"account":"acct-13","amount_cents":990000}`)
	call2 := waitingCall(t, natsURL, dir, "buy-2")
	sel2 := `article[data-approval="` + call2 + `"]`
	do(t, ctx, "deny",
		chromedp.WaitVisible(chromedp.CSS(sel2)),
		chromedp.Click(chromedp.CSS(sel2+" a.button")),
		chromedp.WaitVisible(chromedp.CSS("form.decide.approval")),
		chromedp.Click(chromedp.CSS(`input[name=choice][value=denied]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=operator]`), "carol@finance"),
		chromedp.SendKeys(chromedp.CSS(`input[name=evidence]`), "no invoice for acct-13"),
		chromedp.Click(chromedp.CSS("#sign-approval")),
		chromedp.WaitVisible(chromedp.CSS("#outcome.ok")),
		chromedp.WaitVisible(chromedp.CSS(`#call-detail tr.ev.rejected`)))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "rejected at stage approval") {
		t.Fatalf("denying: outcome %q, want rejected at stage approval", s)
	}
	if s := textOf(t, ctx, `#call-detail tr.ev.rejected`); !strings.Contains(s, "rejected at approval") || !strings.Contains(s, "denied by carol@finance") {
		t.Fatalf("the denied call's result: %q", s)
	}
	// Shown as denied, not as a green retry_allowed.
	do(t, ctx, "the denied call's page", chromedp.Navigate(base+"/call?session=buy-2&call="+call2), chromedp.WaitVisible(chromedp.CSS("#call-detail .badge.denied")))
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#call-detail .badge.retry_allowed").length`)); err != nil || n != 0 {
		t.Fatalf("the denied call shows %d retry_allowed badges (%v)", n, err)
	}
	screenshot(t, ctx, "console-denied")

	// The task stops; the stopped-tasks page shows it.
	hc := connectRole(t, natsURL, dir, access.RoleHost)
	defer hc.Close()
	hjs, err := jetstream.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.PublishStop(context.Background(), hjs, "jw", schema.StopRequest{V: 1, Session: "buy-2", Task: "t-1", Reason: "card reported stolen", At: time.Now().UTC().Format(time.RFC3339)}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "the stopped-tasks page", chromedp.Navigate(base+"/stopped"), chromedp.WaitVisible(chromedp.CSS("table.stopped")))
	if s := textOf(t, ctx, "table.stopped"); !strings.Contains(s, "buy-2") || !strings.Contains(s, "host") || !strings.Contains(s, "card reported stolen") {
		t.Fatalf("the stopped task: %q", s)
	}
	screenshot(t, ctx, "console-stopped")
	if n := ledgerCharges(t, natsURL, dir); n["buy-1"] != 1 || n["buy-2"] != 0 {
		t.Fatalf("ledger charges by session %v, want buy-1:1 (approved, once) and buy-2:0 (denied)", n)
	}
}
