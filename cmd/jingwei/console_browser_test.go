package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
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
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
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
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
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

// TestConsoleBrowser drives the console in headless Chromium against
// `jingwei serve` (authorization on, a real tool worker and recovery
// worker): an uncertain payment appears on the open page without a
// reload; a reviewer signs completed in the form and asking for a plan
// shows the refusal (completed); for a second uncertain payment a
// reviewer signs not_executed, asks for the plan, the page shows it, and
// the tool worker runs the retry once: exactly one charge in the ledger.
func TestConsoleBrowser(t *testing.T) {
	ctx := browser(t)
	dir := filepath.Join(t.TempDir(), "data")
	natsURL, _, _ := startServe(t, dir)
	base := startConsole(t, natsURL, dir, "")

	do(t, ctx, "open the console",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#live-state.up")),
		// A marker a reload would lose.
		chromedp.Evaluate[chromedp.Void](`window.jwNoReload = 42`))

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

	// 2. Sign completed; the plan is refused.
	do(t, ctx, "sign completed",
		chromedp.Click(chromedp.CSS(`article[data-call="c-pay-1"] a.button`)),
		chromedp.WaitVisible(chromedp.CSS("form.decide")),
		chromedp.Click(chromedp.CSS(`input[name=choice][value=completed]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=operator]`), "alice@ops"),
		chromedp.SendKeys(chromedp.CSS(`input[name=evidence]`), "ledger shows charge 1250 for acct-7"),
		chromedp.Click(chromedp.CSS("#sign")),
		chromedp.WaitVisible(chromedp.CSS("#outcome")))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "accepted") {
		t.Fatalf("signing completed: outcome %q, want accepted", s)
	}
	do(t, ctx, "ask for a plan", chromedp.Click(chromedp.CSS("#prepare")), chromedp.WaitVisible(chromedp.CSS("#outcome.refused")))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "completed") || !strings.Contains(s, "refused") {
		t.Fatalf("plan after completed: outcome %q, want the refusal completed", s)
	}
	screenshot(t, ctx, "console-refused")

	// 3. A second payment: not_executed, the plan, one retry.
	do(t, ctx, "back to the list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#live-state.up")))
	openPayment(t, natsURL, dir, "pay-2", "c-pay-2", `{"account":"acct-9","amount_cents":990}`)
	do(t, ctx, "sign not_executed",
		chromedp.WaitVisible(chromedp.CSS(`article[data-call="c-pay-2"]`)),
		chromedp.Click(chromedp.CSS(`article[data-call="c-pay-2"] a.button`)),
		chromedp.WaitVisible(chromedp.CSS("form.decide")))
	screenshot(t, ctx, "console-call")
	do(t, ctx, "sign not_executed",
		chromedp.Click(chromedp.CSS(`input[name=choice][value=not_executed]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=operator]`), "bob@ops"),
		chromedp.SendKeys(chromedp.CSS(`input[name=evidence]`), "no charge for acct-9 in the ledger"),
		chromedp.Click(chromedp.CSS("#sign")),
		chromedp.WaitVisible(chromedp.CSS("#outcome.ok")),
		chromedp.Click(chromedp.CSS("#prepare")),
		chromedp.WaitVisible(chromedp.CSS("#outcome.ok dl.plan")))
	if s := textOf(t, ctx, "#outcome"); !strings.Contains(s, "Retry plan") || !strings.Contains(s, "not_executed by bob@ops") {
		t.Fatalf("plan after not_executed: outcome %q, want the plan", s)
	}
	screenshot(t, ctx, "console-plan")

	// The tool worker runs the retry once: one charge, for pay-2 only.
	nc := connectRole(t, natsURL, dir, stream.RoleWorker)
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
	screenshot(t, ctx, "console-plans")
	do(t, ctx, "the session page", chromedp.Navigate(base+"/session?session=pay-2"), chromedp.WaitVisible(chromedp.CSS(`tr.ev.ok`)))
	screenshot(t, ctx, "console-session")
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
}
