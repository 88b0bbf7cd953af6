package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one line of the report: an invariant (or a bound) with its value
// and whether it met its target. Rows with Must set decide the exit status
// of `jingwei chaos`.
type Row struct {
	// Name names the invariant, e.g. "double charges".
	Name string `json:"invariant"`
	// Value is the figure: a count, or seconds for a latency.
	Value float64 `json:"value"`
	// Unit is "" for a count, "s" for seconds.
	Unit string `json:"unit,omitempty"`
	// Target is the target in words: "= 0", "<= TTL+1s (3s)".
	Target string `json:"target"`
	// Met reports whether the value met the target.
	Met bool `json:"met"`
	// Must is set for the rows that must hold: a row with Must and not Met
	// fails the run (exit status 1).
	Must bool `json:"must"`
	// Examples names up to 5 offenders (session/call ids, request ids).
	Examples []string `json:"examples,omitempty"`
	// Note says what the row counts, or why it could not be computed.
	Note string `json:"note,omitempty"`
}

// zeroRow is a must-be-0 count.
func zeroRow(name string, value int, examples []string, note string) Row {
	return Row{Name: name, Value: float64(value), Target: "= 0", Met: value == 0, Must: true, Examples: cap5(examples), Note: note}
}

// infoRow is a count reported with a target that does not decide the exit
// status.
func infoRow(name string, value int, examples []string, note string) Row {
	r := zeroRow(name, value, examples, note)
	r.Must = false
	return r
}

func cap5(xs []string) []string {
	if len(xs) > 5 {
		return xs[:5]
	}
	return xs
}

// Fault is one fault the run injected, as it happened.
type Fault struct {
	// At is the time since the workload started.
	At Seconds `json:"at"`
	// Kind is worker_kill, recoverer_kill, node_kill, node_restart, pause,
	// resume, partition or heal.
	Kind string `json:"kind"`
	// Target names the process or node (its owner id for a tool worker).
	Target string `json:"target"`
	// Detail says more: how many calls the process had open, what a pause
	// landed on.
	Detail string `json:"detail,omitempty"`
}

// Seconds is a duration written as seconds in JSON.
type Seconds float64

// Exercised counts what the run really did, so that a report with every
// invariant at 0 can be told from a run that tested nothing.
type Exercised struct {
	Actions              int            `json:"actions"`
	Published            int            `json:"published"`
	Republished          int            `json:"republished"`
	PublishRetries       int            `json:"publish_retries"`
	DuplicatePubAcks     int            `json:"duplicate_puback"`
	Calls                int            `json:"calls"`
	Retries              int            `json:"retries"`
	WorkerKills          int            `json:"worker_kills"`
	RecovererKills       int            `json:"recoverer_kills"`
	NodeKills            int            `json:"node_kills"`
	Pauses               int            `json:"pauses"`
	Partitions           int            `json:"partitions"`
	CallsLeftOpenByKills int            `json:"calls_left_open_by_kills"`
	CallsLeftOpenByPause int            `json:"calls_left_open_by_pauses"`
	PlansIssued          int            `json:"plans_issued"`
	PlansRun             int            `json:"plans_run"`
	ReviewsSigned        map[string]int `json:"reviews_signed"`
	HandledDuringPause   int            `json:"calls_handled_during_pauses"`
	Prepares             map[string]int `json:"prepares"`
	ConcurrentPrepares   int            `json:"concurrent_prepares"`
	UnexpectedExits      map[string]int `json:"unexpected_exits"`
	SetupAttempts        int            `json:"setup_attempts"`
	Orders               int            `json:"orders"`
	Charges              int            `json:"charges"`
	Assessments          int            `json:"assessments"`
	// CallResults counts the calls by how they ended on the log: a result
	// status ("rejected:<stage>" for a rejection), or "none".
	CallResults map[string]int `json:"call_results"`

	// SettledByProbes counts the calls an automated review (a probe's)
	// settled, by verdict; ProbesUndecided those whose probe could not
	// decide (evidence only); SettledByPeople those the harness's
	// reviewer (a person) reviewed, by verdict, PeopleWithoutProbe of
	// them with no probe review at all (the probe failed or never ran).
	SettledByProbes    map[string]int `json:"settled_by_probes"`
	ProbesUndecided    int            `json:"probes_undecided"`
	SettledByPeople    map[string]int `json:"settled_by_people"`
	PeopleWithoutProbe int            `json:"people_reviews_without_probe_evidence"`
}

// Latency is the crash → first assessment distribution: from the SIGKILL
// of a tool worker to the first stored assessment of each call it left
// open.
type Latency struct {
	Samples int     `json:"samples"`
	P50     Seconds `json:"p50"`
	P90     Seconds `json:"p90"`
	P99     Seconds `json:"p99"`
	Max     Seconds `json:"max"`
	// Bound is the target: lease TTL + 1 s on one node, + 5 s on a
	// cluster.
	Bound Seconds `json:"bound"`
	// ResultToAssessment is the time from a call's tool.result to its
	// first assessment, over every closed call: how far the recovery
	// worker's classifier lags (a stalled consumer shows here).
	ResultToAssessment Distribution `json:"result_to_assessment"`
	// CrashToFence and FenceToAssessment split the samples of the crash →
	// first assessment distribution that a session.fenced closed (the
	// others, assessed before any fence — a call that was finished after
	// all — are in neither): from the SIGKILL to the fence's stored time
	// (lease expiry, its detection and the takeover), and from the fence
	// to the first stored assessment (the classifier reading the fence and
	// the publish). They tell where a missed bound's time went.
	CrashToFence      Distribution `json:"crash_to_fence"`
	FenceToAssessment Distribution `json:"fence_to_assessment"`
	// Split, on a cluster, splits the samples by what the cluster was
	// doing between the lease's expiry and the first assessment; nil on a
	// single node or an external deployment (no leader monitor).
	Split *LatencySplit `json:"split,omitempty"`
	// List is every sample, slowest first, with its split: where a missed
	// bound's time went, call by call.
	List []LatencySample `json:"list,omitempty"`
}

// LatencySample is one crash → first assessment sample.
type LatencySample struct {
	// Call is session/call_id; Owner the killed incarnation.
	Call  string `json:"call"`
	Owner string `json:"owner"`
	// Killed is the kill's time since the workload started.
	Killed Seconds `json:"killed"`
	// Latency is the kill → first assessment time; Fence the kill →
	// fence time (null: assessed before any fence).
	Latency Seconds `json:"latency"`
	Fence   Seconds `json:"fence"`
	// Group is leaderless, node_down, recoverer_restart or healthy on a
	// cluster ("" on one node); Leaderless the time of its span without a leader.
	Group      string  `json:"group,omitempty"`
	Leaderless Seconds `json:"leaderless,omitempty"`
}

// LatencySplit splits the crash → first assessment samples of a cluster
// run (all of them are in Latency itself) by Report.LeaderWindows and the
// node outages of Report.Faults, over each sample's span from its lease's
// expiry (the kill + the lease TTL) to its first assessment.
type LatencySplit struct {
	// NodeDown are the samples during which a node was down or cut off
	// while every leader the takeover needs was there: the "cluster with a
	// node down" of the bound, which is checked on their p99.
	NodeDown Distribution `json:"node_down_with_leaders"`
	// Leaderless are the samples that met a leaderless window: no fence or
	// assessment can be written until nats-server elects a new leader.
	Leaderless Distribution `json:"leaderless"`
	// LeaderlessBeyondWindows is, for each leaderless sample, its latency
	// minus the part of its span without a leader: what jingwei added.
	LeaderlessBeyondWindows Distribution `json:"leaderless_beyond_windows"`
	// LeadersBackToFence is, for each leaderless sample fenced after its
	// last window closed, the time from the leader's return to the fence.
	LeadersBackToFence Distribution `json:"leaders_back_to_fence"`
	// RecovererRestart are, of the others, those during which the
	// recovery worker was killed (and restarted).
	RecovererRestart Distribution `json:"recoverer_restart"`
	// Healthy are the rest: every node up, every leader there, the
	// recovery worker running.
	Healthy Distribution `json:"healthy"`
	// Bound is the node-down samples' bound: lease TTL + 5 s.
	Bound Seconds `json:"bound"`
}

// Distribution sums up a set of durations.
type Distribution struct {
	Samples int     `json:"samples"`
	P50     Seconds `json:"p50"`
	P99     Seconds `json:"p99"`
	Max     Seconds `json:"max"`
}

// Report is the outcome of a run: `jingwei chaos` prints it as a table, or
// as JSON with --json.
type Report struct {
	// Seed repeats the run's random choices (--seed).
	Seed int64 `json:"seed"`
	// Mode is cluster, single or external.
	Mode Mode `json:"mode"`
	// Label describes the run in words.
	Label string `json:"label"`
	// Config are the sizes and schedule the run used.
	Config ReportConfig `json:"config"`
	// Elapsed is how long the run took.
	Elapsed Seconds `json:"elapsed"`
	// Dir is the run's directory when it was kept (Config.Keep, or
	// Config.KeepOnFailure and the run failed), else "".
	Dir string `json:"dir,omitempty"`
	// Rows are the invariants and bounds, in a fixed order.
	Rows []Row `json:"rows"`
	// Latency is the crash → first assessment distribution.
	Latency Latency `json:"latency"`
	// Exercised counts what the run did.
	Exercised Exercised `json:"exercised"`
	// Faults lists every fault injected, in order.
	Faults []Fault `json:"faults"`
	// LeaderWindows are, on a cluster, the spans in which a JetStream
	// leader the takeover needs (the meta leader, KV_jw_leases,
	// JW_EVENTS, the recovery worker's consumer of it,
	// JW_ASSESSMENTS) answered none of the healthy nodes,
	// polled every 100 ms: the nats-server elections after each fault.
	LeaderWindows []LeaderWindow `json:"leader_windows,omitempty"`
	// IsolatedLeaderWindows are the windows the faulted node itself saw
	// while it was down, cut off or restarting: what a process connected
	// to that node lived through.
	IsolatedLeaderWindows []LeaderWindow `json:"isolated_leader_windows,omitempty"`
	// Notes are things the harness had to work around or noticed (a
	// process that exited by itself, a settle that timed out).
	Notes []string `json:"notes,omitempty"`
	// Error is why the run could not finish, "" when it did.
	Error string `json:"error,omitempty"`
}

// ReportConfig is the part of the configuration a reader of the report
// needs to repeat or judge it.
type ReportConfig struct {
	Actions        int     `json:"actions"`
	Sessions       int     `json:"sessions"`
	Workers        int     `json:"workers"`
	Nodes          int     `json:"nodes"`
	Replicas       int     `json:"replicas"`
	LeaseTTL       Seconds `json:"lease_ttl"`
	Duration       Seconds `json:"duration"`
	RecovererKills int     `json:"recoverer_kills"`
	NodeKills      int     `json:"node_kills"`
	Pauses         int     `json:"pauses"`
	Partitions     int     `json:"partitions"`
	Republish      float64 `json:"republish"`
	Sync           string  `json:"sync"`
	// KillEvery is the range between two tool-worker kills (none: null).
	KillEvery    []Seconds `json:"kill_every"`
	SlowFraction float64   `json:"slow_fraction"`
	ToolDelay    Seconds   `json:"tool_delay"`
}

// Failed returns the rows with Must set that were not met.
func (r *Report) Failed() []Row {
	var out []Row
	for _, row := range r.Rows {
		if row.Must && !row.Met {
			out = append(out, row)
		}
	}
	return out
}

// Err returns nil when every must-hold row was met, else an error wrapping
// ErrInvariantFailed that names the failed rows.
func (r *Report) Err() error {
	f := r.Failed()
	if len(f) == 0 {
		return nil
	}
	names := make([]string, len(f))
	for i, row := range f {
		names[i] = fmt.Sprintf("%s (%s)", row.Name, fmtValue(row))
	}
	return fmt.Errorf("%w: %s", ErrInvariantFailed, strings.Join(names, ", "))
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for a reader: a header, what the run did,
// the faults summed up, and the table of invariants (invariant, value,
// target, met), as `jingwei bench` prints its rows.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "jingwei chaos (%s, seed %d) — %d actions over %d sessions, %d tool workers, lease TTL %s, %s\n\n",
		r.Label, r.Seed, r.Config.Actions, r.Config.Sessions, r.Config.Workers, dur(r.Config.LeaseTTL), dur(r.Elapsed))
	e := r.Exercised
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "faults\tworker kills %d, recoverer kills %d, node kills %d, pauses %d, partitions %d\n", e.WorkerKills, e.RecovererKills, e.NodeKills, e.Pauses, e.Partitions)
	fmt.Fprintf(tw, "workload\t%d published (%d again with the same request_id, %d publish retries), %d calls, %d retries\n", e.Published, e.Republished, e.PublishRetries, e.Calls, e.Retries)
	fmt.Fprintf(tw, "recovery\t%d calls left open by kills, %d by pauses; %d plans issued, %d run; reviews %s; prepares %s\n",
		e.CallsLeftOpenByKills, e.CallsLeftOpenByPause, e.PlansIssued, e.PlansRun, counts(e.ReviewsSigned), counts(e.Prepares))
	fmt.Fprintf(tw, "reviews\tsettled by probes %s, %d undecided by their probe; by people %s (%d with no probe review at all)\n",
		counts(e.SettledByProbes), e.ProbesUndecided, counts(e.SettledByPeople), e.PeopleWithoutProbe)
	fmt.Fprintf(tw, "records\t%d orders, %d ledger charges, %d assessments; calls ended %s\n", e.Orders, e.Charges, e.Assessments, counts(e.CallResults))
	if d := r.Latency.ResultToAssessment; d.Samples > 0 {
		fmt.Fprintf(tw, "classifier\tresult -> first assessment p50 %s, p99 %s, max %s (%d calls)\n", secs(d.P50), secs(d.P99), secs(d.Max), d.Samples)
	}
	if c, f := r.Latency.CrashToFence, r.Latency.FenceToAssessment; c.Samples > 0 {
		fmt.Fprintf(tw, "takeover\tcrash -> fence p50 %s, p99 %s, max %s; fence -> first assessment p50 %s, p99 %s, max %s (%d calls)\n",
			secs(c.P50), secs(c.P99), secs(c.Max), secs(f.P50), secs(f.P99), secs(f.Max), c.Samples)
	}
	if sp := r.Latency.Split; sp != nil {
		d := func(x Distribution) string {
			return fmt.Sprintf("p50 %s, p99 %s, max %s (%d)", secs(x.P50), secs(x.P99), secs(x.Max), x.Samples)
		}
		fmt.Fprintf(tw, "latency split\t(i) all: p50 %s, p90 %s, p99 %s, max %s (%d)\n", secs(r.Latency.P50), secs(r.Latency.P90), secs(r.Latency.P99), secs(r.Latency.Max), r.Latency.Samples)
		fmt.Fprintf(tw, "\t(ii) a node down, leaders up: %s; bound p99 <= %s\n", d(sp.NodeDown), dur(sp.Bound))
		fmt.Fprintf(tw, "\t(iii) a leaderless window: %s; minus the leaderless time %s; leaders back -> fence %s\n", d(sp.Leaderless), d(sp.LeaderlessBeyondWindows), d(sp.LeadersBackToFence))
		fmt.Fprintf(tw, "\tall nodes up and leaders, the recovery worker restarted: %s\n", d(sp.RecovererRestart))
		fmt.Fprintf(tw, "\tall nodes up and leaders, the recovery worker running: %s\n", d(sp.Healthy))
	}
	for _, line := range windowLines(r.LeaderWindows) {
		fmt.Fprintf(tw, "leaderless\t%s\n", line)
	}
	for _, line := range windowLines(r.IsolatedLeaderWindows) {
		fmt.Fprintf(tw, "isolated\t%s\n", line)
	}
	if len(e.UnexpectedExits) > 0 {
		fmt.Fprintf(tw, "exits\tprocesses that exited by themselves (restarted): %s\n", counts(e.UnexpectedExits))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "invariant\tvalue\ttarget\tmet")
	for _, row := range r.Rows {
		met := strconv.FormatBool(row.Met)
		if !row.Must && !row.Met {
			met = "false (reported)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.Name, fmtValue(row), row.Target, met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var ex []string
	for _, row := range r.Rows {
		if len(row.Examples) > 0 {
			ex = append(ex, fmt.Sprintf("  %s: %s", row.Name, strings.Join(row.Examples, ", ")))
		}
	}
	if len(ex) > 0 {
		fmt.Fprintf(w, "\nexamples:\n%s\n", strings.Join(ex, "\n"))
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	if r.Error != "" {
		fmt.Fprintf(w, "\nerror: %s\n", r.Error)
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "\nrun directory (stores, keys, child logs): %s\n", r.Dir)
	}
	return nil
}

func fmtValue(r Row) string {
	if math.IsNaN(r.Value) {
		return "-"
	}
	if r.Unit == "s" {
		return strconv.FormatFloat(r.Value, 'f', 2, 64) + "s"
	}
	return strconv.FormatFloat(r.Value, 'f', -1, 64)
}

func secs(s Seconds) string {
	if math.IsNaN(float64(s)) {
		return "-"
	}
	return strconv.FormatFloat(float64(s), 'f', 2, 64) + "s"
}

func dur(s Seconds) string {
	return (time.Duration(float64(s) * float64(time.Second))).Round(100 * time.Millisecond).String()
}

// counts writes a map of counts as "a 1, b 2" in key order.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// MarshalJSON writes NaN (a figure that could not be computed) as null.
func (s Seconds) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(float64(s), 'f', 3, 64)), nil
}

// MarshalJSON writes a row's NaN value as null.
func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	p := struct {
		plain
		Value *float64 `json:"value"`
	}{plain: plain(r)}
	if !math.IsNaN(r.Value) && !math.IsInf(r.Value, 0) {
		p.Value = &r.Value
	}
	return json.Marshal(p)
}
