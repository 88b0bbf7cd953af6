package metrics

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// MaxToolLabels bounds the distinct values of the tool label: a tool
// name beyond them (an agent may name any tool, which admission then
// refuses) is counted as "other".
const MaxToolLabels = 256

// maxOpen bounds the calls whose tool Runtime remembers between their
// tool.call and tool.result (a runtime has few calls in flight; a result
// whose call was forgotten is counted under tool "unknown").
const maxOpen = 100_000

// Runtime counts what the tool workers' runtimes record: it is a
// worker.Observer (set it as worker.Config.Observer, or
// toolworker.Config.Runtime.Observer). Safe for concurrent use.
type Runtime struct {
	calls      *prometheus.CounterVec
	rejections *prometheus.CounterVec
	appends    *prometheus.HistogramVec
	appendErrs *prometheus.CounterVec

	mu    sync.Mutex
	open  map[string]string // session/call id → tool, until the result
	tools map[string]bool   // the tool label values in use
}

var _ worker.Observer = (*Runtime)(nil)

// NewRuntime registers the runtime metrics on reg and returns their
// observer.
func NewRuntime(reg prometheus.Registerer) *Runtime {
	r := &Runtime{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "tool_calls_total",
			Help: "Tool calls whose tool.result this process recorded, by tool and result status (ok, failed, timeout, cancelled, rejected, budget_exhausted, output_limit).",
		}, []string{"tool", "status"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "admission_rejections_total",
			Help: "Tool calls refused by admission before their body ran, by stage (validate, permission, guard, budget, approval, ...).",
		}, []string{"stage"}),
		appends: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "log_append_seconds",
			Help:    "Latency of an append to a session log (publish to JetStream acknowledgement), by event type.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms … 4 s
		}, []string{"type"}),
		appendErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "log_append_errors_total",
			Help: "Appends to a session log that failed, by event type and code (fenced: the session was taken over; log_unavailable).",
		}, []string{"type", "code"}),
		open:  map[string]string{},
		tools: map[string]bool{},
	}
	// Present from the start, at zero: an alert on its rate, or a
	// dashboard, sees the series before the first failure.
	for _, typ := range []string{schema.TypeCall, schema.TypeStarted, schema.TypeResult, schema.TypeFenced, "other"} {
		for _, code := range []schema.Code{schema.CodeFenced, schema.CodeLog} {
			r.appendErrs.WithLabelValues(typ, string(code))
		}
	}
	reg.MustRegister(r.calls, r.rejections, r.appends, r.appendErrs)
	return r
}

var _ worker.ResultObserver = (*Runtime)(nil)

// AppendedResult is worker.ResultObserver's: Appended for a tool.result,
// with the call's tool as the runtime knows it — also for a call whose
// tool.call another process recorded (a call resumed after a takeover).
func (r *Runtime) AppendedResult(ev schema.Event, tool string, d time.Duration, err error) {
	if tool != "" && err == nil && ev.Result != nil {
		key := ev.Session + "/" + ev.Result.CallID
		r.mu.Lock()
		if _, ok := r.open[key]; !ok && len(r.open) < maxOpen {
			r.open[key] = r.toolLabel(tool)
		}
		r.mu.Unlock()
	}
	r.Appended(ev, d, err)
}

// Appended is worker.Observer's: it times the append and, for a recorded
// tool.result, counts the call by tool and status (and a rejection by
// stage).
func (r *Runtime) Appended(ev schema.Event, d time.Duration, err error) {
	typ := eventType(ev.Type)
	if err != nil {
		// The runtime maps these as it returns them: a fence is fenced,
		// anything else the log's failure.
		code := string(schema.CodeLog)
		if errors.Is(err, stream.ErrFenced) {
			code = string(schema.CodeFenced)
		}
		r.appendErrs.WithLabelValues(typ, code).Inc()
		return
	}
	r.appends.WithLabelValues(typ).Observe(d.Seconds())
	switch {
	case ev.Call != nil:
		r.mu.Lock()
		if len(r.open) < maxOpen {
			r.open[ev.Session+"/"+ev.Call.CallID] = r.toolLabel(ev.Call.Tool)
		}
		r.mu.Unlock()
	case ev.Result != nil:
		key := ev.Session + "/" + ev.Result.CallID
		r.mu.Lock()
		tool, ok := r.open[key]
		delete(r.open, key)
		r.mu.Unlock()
		if !ok {
			tool = "unknown"
		}
		r.calls.WithLabelValues(tool, string(ev.Result.Status)).Inc()
		if ev.Result.Status == schema.StatusRejected {
			stage := string(ev.Result.Stage)
			if stage == "" {
				stage = "unknown"
			}
			r.rejections.WithLabelValues(stage).Inc()
		}
	}
}

// toolLabel returns the label value of a tool name (r.mu held).
func (r *Runtime) toolLabel(tool string) string {
	if r.tools[tool] {
		return tool
	}
	if len(r.tools) >= MaxToolLabels || len(tool) > 128 {
		return "other"
	}
	r.tools[tool] = true
	return tool
}

// eventType bounds the type label to the event types of the schema.
func eventType(t string) string {
	switch t {
	case schema.TypeCall, schema.TypeStarted, schema.TypeResult, schema.TypeFenced:
		return t
	}
	return "other"
}

// Ownership is what a tool worker holds now, read at each scrape (from
// toolworker.Worker.Stats).
type Ownership struct {
	// Partitions is the partition leases held.
	Partitions int
	// Sessions is the sessions of those partitions held in memory.
	Sessions int
	// Waiting is the sessions with work waiting for a free slot.
	Waiting int
}

// NewLeases registers jingwei_leases_held (partition leases held),
// jingwei_sessions_held and jingwei_sessions_waiting on reg, from what
// owned returns at each scrape.
func NewLeases(reg prometheus.Registerer, owned func() Ownership) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "leases_held",
			Help: "Partition leases this tool worker holds (the partitions of sessions it owns).",
		}, func() float64 { return float64(owned().Partitions) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "sessions_held",
			Help: "Sessions of its partitions this tool worker holds in memory (running, queued or recently run).",
		}, func() float64 { return float64(owned().Sessions) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "sessions_waiting",
			Help: "Sessions with work waiting for a free slot (the worker is full: --max-sessions).",
		}, func() float64 { return float64(owned().Waiting) }),
	)
}
