// Package metrics is jingwei's Prometheus instrumentation: the metrics of
// the tool workers' runtimes, of the recovery worker and of the review
// console, and the /metrics endpoint `--metrics ADDR` serves (serve,
// worker, recover, console).
//
// The components are instrumented from outside wherever they can be: the
// recovery worker's state (calls awaiting review, plans by state, open
// calls, classifier counters) and its consumer lag are read from
// Recoverer.Status and Recoverer.ConsumerLag at each scrape, the leases a
// tool worker holds from Worker.Owned. What happens between scrapes is
// counted through two small observer hooks: worker.Observer (every append
// of a runtime: calls by tool and status, admission rejections by stage,
// append latency) and recoverer.Observer (every published assessment,
// every takeover: assessments by outcome and decision, takeovers,
// crash-to-assessment latency).
//
// Every metric is per process, as Prometheus expects: a tool worker counts
// the calls it ran, so sum() over the workers is the deployment's. Names
// follow the Prometheus conventions: jingwei_<what>_total for counters,
// _seconds for durations, base units, and labels of bounded cardinality
// (a tool name seen beyond MaxToolLabels distinct ones is counted as
// "other").
//
// Metrics (see the README's "Metrics" section for the alert example):
//
//	jingwei_tool_calls_total{tool,status}           tool.result events recorded by this worker
//	jingwei_admission_rejections_total{stage}       calls refused by admission (status rejected)
//	jingwei_log_append_seconds{type}                session-log append latency (histogram)
//	jingwei_log_append_errors_total{type,code}      appends that failed (fenced, log_unavailable)
//	jingwei_leases_held                             partition leases this tool worker holds
//	jingwei_sessions_held                           sessions of them held in memory
//	jingwei_sessions_waiting                        sessions with work waiting for a slot
//	jingwei_assessments_total{outcome,decision}     assessments the recovery workers published (*)
//	jingwei_takeovers_total                         sessions the recovery worker took over
//	jingwei_crash_to_assessment_seconds             a closed call's last event to its assessment (histogram)
//	jingwei_calls_awaiting_review                   needs_review calls without a plan since
//	jingwei_review_wait_oldest_seconds              how long the oldest of them has waited
//	jingwei_open_calls                              calls without a result, as the classifier tracks them
//	jingwei_open_call_oldest_seconds                how long the oldest of them (not waiting for approval) has been open
//	jingwei_plans{state}                            plans in jw_plans by state (issued, consumed)
//	jingwei_recoverer_events_seen_total             session events the classifier read
//	jingwei_recoverer_consumer_pending_events       events not yet delivered to the classifier
//	jingwei_recoverer_consumer_ack_pending_events   events delivered, not yet acknowledged
//	jingwei_recoverer_up                            1 when the last scrape read the recovery worker's state
//	jingwei_plan_requests_total{result}             plans asked of this recovery worker: issued or the refusal's code
//	jingwei_reviews_judged_total{verdict,result}    reviews judged: accepted or the rejection's code (*)
//	jingwei_approvals_timed_out_total               calls whose approval timed out, as the classifiers read them (*)
//	jingwei_recoverer_counting                      1 while this recovery worker is the one counting (*)
//	jingwei_nats_…                                  the embedded NATS server's own (serve only; see NewNATSServer)
//	jingwei_console_reviews_total{verdict,result}   reviews the console signed, by how they were judged
//	jingwei_console_plan_requests_total{result}     retry plans the console asked for, by answer
//
// (*) Every recovery worker publishes every assessment, judges every
// review and reads every approval timeout; only one of them counts these
// at a time — the holder of the counting lease (recoverer.CountingLease,
// a key of jw_leases with the lease TTL), once it caught up with what was
// there when it took it — so sum() over the recovery workers counts each
// once. A counting worker that stops or freezes stops counting by its own
// clock before its lease can expire and another take it: a hand-over
// leaves a gap (an undercount), never a double count; so does the restart
// of a lone recovery worker (the backlog it classifies on start).
// jingwei_recoverer_counting shows which worker counts.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric name.
const Namespace = "jingwei"

// ScrapeTimeout bounds what a scrape asks the server (the recovery
// worker's status, its consumer's info).
const ScrapeTimeout = 5 * time.Second

// NewRegistry returns a registry holding the Go runtime's and the
// process's collectors (go_*, process_*); the components' metrics are
// registered on it by NewRuntime, NewRecovery, NewLeases and NewConsole.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler returns the /metrics handler of reg (the text exposition
// format, or OpenMetrics when the scraper asks for it).
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
}

// Serve serves reg on ln (/metrics; / says where to look) until ctx is
// done, then shuts the server down and returns nil; it returns the
// server's error if it stops on its own.
func Serve(ctx context.Context, ln net.Listener, reg *prometheus.Registry) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(reg))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("jingwei metrics: GET /metrics\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
