package main

import (
	"errors"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/streamtest"
)

var metricsURLRE = regexp.MustCompile(`metrics on (http://\S+/metrics)`)

// metricsURL waits for a process's "metrics on URL" line on stderr.
func metricsURL(t *testing.T, stderr *lockedBuffer) string {
	t.Helper()
	var u string
	streamtest.Eventually(t, 10*time.Second, "the metrics URL on stderr", func() bool {
		if m := metricsURLRE.FindStringSubmatch(stderr.String()); m != nil {
			u = m[1]
			return true
		}
		return false
	})
	return u
}

// lintMetrics runs promlint over what a /metrics endpoint serves.
func lintMetrics(t *testing.T, u string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	problems, err := promlint.New(resp.Body).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint %s: %s", p.Metric, p.Text)
	}
}

// scrapeMetrics GETs a /metrics endpoint and returns its samples as
// `name{label="value",…}` (labels in name order) → value; a histogram
// gives name_count and name_sum.
func scrapeMetrics(t *testing.T, u string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", u, err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			sfx := ""
			if len(ls) > 0 {
				sfx = "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[name+sfx] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name+sfx] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[name+"_count"+sfx] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+sfx] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// agentCall sends one request on jw.api.call as the agent role and waits
// for the answer (any: ok, or an error answer).
func agentCall(t *testing.T, nc *nats.Conn, req string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := nc.Request("jw.api.call", []byte(req), 20*time.Second)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // the gateway is still registering
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
}

// TestMetricsScrape runs a scripted story against `jingwei serve
// --metrics` and `jingwei console --metrics` and checks the scraped
// counters and gauges against it: calls of each status the example tools
// give (ok, failed, rejected at arguments), a crashed writer's payment
// taken over and awaiting review, a review and a plan through the console,
// the retry run once.
func TestMetricsScrape(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	natsURL, serveErr, _ := startServe(t, dir, "--no-prober", "--metrics", "127.0.0.1:0")
	serveMetrics := metricsURL(t, serveErr)
	base, consoleErr := startConsoleLog(t, natsURL, dir, "--metrics", "127.0.0.1:0")
	consoleMetrics := metricsURL(t, consoleErr)

	agent := connectRole(t, natsURL, dir, access.RoleAgent)
	defer agent.Close()
	for i, c := range []struct{ tool, args string }{
		{"catalog.lookup", `{"sku":"A-1"}`},  // ok
		{"catalog.lookup", `{"sku":"NOPE"}`}, // failed: unknown sku
		{"catalog.lookup", `{}`},             // rejected at arguments
		{"orders.create", `{"sku":"A-1","qty":1}`},
	} {
		agentCall(t, agent, `{"v":1,"request_id":"r-`+string(rune('a'+i))+`","session":"m-agent","task":"t-1","tool":"`+c.tool+`","arguments":`+c.args+`}`)
	}
	openPayment(t, natsURL, dir, "m-pay", "c-m-pay", `{"account":"acct-1","amount_cents":700}`)

	var got map[string]float64
	streamtest.Eventually(t, 30*time.Second, "the payment awaits review in the metrics", func() bool {
		got = scrapeMetrics(t, serveMetrics)
		// The takeover reports its crash-to-assessment after its fence,
		// which the classifier may have assessed already.
		return got["jingwei_calls_awaiting_review"] == 1 && got["jingwei_crash_to_assessment_seconds_count"] == 1
	})
	for k, v := range map[string]float64{
		`jingwei_tool_calls_total{status="ok",tool="catalog.lookup"}`:            1,
		`jingwei_tool_calls_total{status="failed",tool="catalog.lookup"}`:        1,
		`jingwei_tool_calls_total{status="rejected",tool="catalog.lookup"}`:      1,
		`jingwei_tool_calls_total{status="ok",tool="orders.create"}`:             1,
		`jingwei_admission_rejections_total{stage="arguments"}`:                  1,
		`jingwei_takeovers_total`:                                                1,
		`jingwei_crash_to_assessment_seconds_count`:                              1,
		`jingwei_assessments_total{decision="needs_review",outcome="uncertain"}`: 1,
		`jingwei_assessments_total{decision="refuse",outcome="completed"}`:       2, // the two ok calls
		`jingwei_recoverer_up`:                                                   1,
		`jingwei_plans{state="issued"}`:                                          0,
		`jingwei_leases_held`:                                                    float64(stream.DefaultPartitions), // one worker owns every partition
		`jingwei_sessions_held`:                                                  1,                                 // m-agent, until idle
		`jingwei_log_append_seconds_count{type="tool.call"}`:                     4,
		`jingwei_recoverer_consumer_pending_events`:                              0,
	} {
		if got[k] != v {
			t.Errorf("serve before the review: %s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["jingwei_recoverer_consumer_pending_events"]; !ok {
		t.Error("no jingwei_recoverer_consumer_pending_events")
	}
	// Present before anything failed, at zero.
	for _, k := range []string{`jingwei_log_append_errors_total{code="fenced",type="tool.result"}`, `jingwei_log_append_errors_total{code="log_unavailable",type="tool.call"}`,
		`jingwei_plan_requests_total{result="issued"}`, `jingwei_approvals_timed_out_total`} {
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("serve at the start: %s = %v (present %v), want 0", k, v, ok)
		}
	}
	// The embedded NATS server's own metrics, read in process.
	for _, k := range []string{"jingwei_nats_connections", "jingwei_nats_connections_total", "jingwei_nats_jetstream_storage_bytes", "jingwei_nats_jetstream_streams",
		"jingwei_nats_jetstream_consumers", "jingwei_nats_jetstream_messages", "jingwei_nats_jetstream_api_requests_total", "jingwei_nats_in_messages_total", "jingwei_nats_up"} {
		if got[k] <= 0 {
			t.Errorf("serve: %s = %v, want > 0", k, got[k])
		}
	}
	if _, ok := got["jingwei_nats_jetstream_api_errors_total"]; !ok {
		t.Error("serve: no jingwei_nats_jetstream_api_errors_total")
	}
	lintMetrics(t, serveMetrics)
	// The writer's last event to the assessment spans at least the lease
	// TTL (1 s).
	if s := got["jingwei_crash_to_assessment_seconds_sum"]; s < 0.9 || s > 30 {
		t.Errorf("crash to assessment %vs, want about the lease TTL (1s)", s)
	}

	// Through the console: a plan asked too early (refused), the review,
	// the plan.
	w := newWebClient(t, base)
	token := w.awaitCall("m-pay", "c-m-pay")
	target := url.Values{"csrf": {token}, "session": {"m-pay"}, "call": {"c-m-pay"}}
	if code, body := w.post("/prepare", target, nil); code != http.StatusOK || !strings.Contains(body, "needs_review") {
		t.Fatalf("early prepare: %d\n%s", code, body)
	}
	if code, body := w.post("/decide", reviewForm(t, personKey(t, dir, reviewerKeyFile), token, "m-pay", "c-m-pay", "not_executed"), nil); code != http.StatusOK || !strings.Contains(body, "accepted") {
		t.Fatalf("review: %d\n%s", code, body)
	}
	if code, body := w.post("/prepare", target, nil); code != http.StatusOK || !strings.Contains(body, `class="outcome ok"`) {
		t.Fatalf("prepare: %d\n%s", code, body)
	}
	cm := scrapeMetrics(t, consoleMetrics)
	for k, v := range map[string]float64{
		`jingwei_console_reviews_total{result="accepted",verdict="not_executed"}`: 1,
		`jingwei_console_plan_requests_total{result="needs_review"}`:              1,
		`jingwei_console_plan_requests_total{result="issued"}`:                    1,
	} {
		if cm[k] != v {
			t.Errorf("console: %s = %v, want %v", k, cm[k], v)
		}
	}

	streamtest.Eventually(t, 30*time.Second, "the retry ran and its plan is consumed", func() bool {
		got = scrapeMetrics(t, serveMetrics)
		return got[`jingwei_plans{state="consumed"}`] == 1 && got[`jingwei_tool_calls_total{status="ok",tool="payments.charge"}`] == 1 &&
			got["jingwei_recoverer_consumer_pending_events"] == 0 && got["jingwei_recoverer_consumer_ack_pending_events"] == 0 &&
			got[`jingwei_assessments_total{decision="refuse",outcome="completed"}`] >= 3 // counted once its publish is acknowledged
	})
	for k, v := range map[string]float64{
		`jingwei_plan_requests_total{result="needs_review"}`:                     1, // the console's early prepare
		`jingwei_plan_requests_total{result="issued"}`:                           1,
		`jingwei_reviews_judged_total{result="accepted",verdict="not_executed"}`: 1,
		`jingwei_calls_awaiting_review`:                                          0,
		`jingwei_review_wait_oldest_seconds`:                                     0,
		`jingwei_plans{state="issued"}`:                                          0,
		`jingwei_tool_calls_total{status="ok",tool="payments.charge"}`:           1,
		`jingwei_takeovers_total`:                                                1,
		`jingwei_assessments_total{decision="refuse",outcome="completed"}`:       3, // + the retry
	} {
		if got[k] != v {
			t.Errorf("serve after the retry: %s = %v, want %v", k, got[k], v)
		}
	}
}
