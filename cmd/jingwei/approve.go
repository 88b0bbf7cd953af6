package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/service"
)

func init() {
	register(command{name: "approve", summary: "sign and publish the approval of a call waiting for approval", run: func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return runAnswer(ctx, "approve", schema.Approved, args, stdout, stderr)
	}})
	register(command{name: "deny", summary: "sign and publish the denial of a call waiting for approval", run: func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return runAnswer(ctx, "deny", schema.Denied, args, stdout, stderr)
	}})
	register(command{name: "task", summary: "stop a task (jingwei task stop): no new calls, no plans, budget never restored", run: runTask})
	commandRole["approve"] = access.RoleReviewer
	commandRole["deny"] = access.RoleReviewer
	commandRole["task"] = access.RoleHost
}

const approveHelp = `  jingwei approve|deny --session S --call C --approver NAME --key FILE [--reason TEXT] [--json]

Signs an answer to a call waiting for approval (docs/protocol.md §17) with an
approver nkey (--key: a seed file made by 'jingwei keys new'; 'jingwei serve'
makes one in its data directory) and publishes it on jw.approvals.<session>,
waiting for JetStream's acknowledgement. The tool worker that owns the
session (or takes it: the answer may be given while no worker runs) checks
the signature against its trusted approvers (worker --trust-approvers) and:

  approve  records approval.granted and starts the call's body, once
  deny     ends the call rejected at stage approval; the body never runs

An answer is bound to one call id: a retry of the call is a new call and
needs an answer of its own. An answer for a call that does not wait (any
more) changes nothing; answers stay in JW_APPROVALS (the audit trail).

Before publishing, the command reads the session's log (jw.api.history) and
refuses an answer for a call that does not wait for approval (not_waiting:
never asked, approved or ended already, unknown session): nothing is
published. After publishing it waits (--wait, default 10s) until the log
shows the answer's effect — approval.granted, or for deny the call's
result rejected at stage approval — and reports it: accepted. An answer
still without effect by then is reported refused, invalid_approval: its
signer is not among the tool workers' trusted approvers (definitely so when
<auth dir>/approvers is readable here and lacks it), or no tool worker runs
for the session (it is then judged when one takes the session: answer with
--wait 0 when none runs, and the command only publishes).

Output: one line; --json prints {"approval","subject","outcome","seq"}
(outcome "accepted", or "published" with --wait 0).

Exit status: 0 accepted; 1 unexpected failure; 2 usage; 3 refused
({"error":…} on stdout: not_waiting or field_too_long with nothing
published; invalid_approval or not_waiting after publishing;
permission_denied: the credentials may not publish answers (role
reviewer)); 4 the server is unreachable.`

func runAnswer(ctx context.Context, name string, d schema.ApprovalDecision, args []string, stdout, stderr io.Writer) int {
	fs := newFlags(name, "Sign and publish an answer to a call waiting for approval.", approveHelp, stderr)
	var cf clientFlags
	cf.register(fs, 10*time.Second)
	session := fs.String("session", "", "session id (required)")
	call := fs.String("call", "", "call id waiting for approval (required; jingwei status lists them)")
	approver := fs.String("approver", "", "who you are, e.g. alice@finance (required)")
	reason := fs.String("reason", "", "why, e.g. a ticket")
	keyFile := fs.String("key", "", "approver nkey seed file (required)")
	asJSON := fs.Bool("json", false, "print the signed answer and its outcome as JSON")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for the tool worker to record the answer's effect; 0: publish only (no tool worker runs now: the next one judges it)")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	switch {
	case stream.ValidateSession(*session) != nil:
		return usageError(stderr, name, "--session: %v", stream.ValidateSession(*session))
	case *call == "":
		return usageError(stderr, name, "--call is required")
	case strings.TrimSpace(*approver) == "":
		return usageError(stderr, name, "--approver is required: say who you are")
	case *keyFile == "":
		return usageError(stderr, name, "--key is required (create one with: jingwei keys new)")
	}
	kp, err := loadUserKey(*keyFile)
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	a, err := recovery.SignApproval(kp, schema.Approval{V: schema.Version, Session: *session, CallID: *call, Decision: d,
		Approver: *approver, Reason: *reason, At: time.Now().UTC().Format(time.RFC3339)})
	if err == nil {
		err = a.Validate()
	}
	if err != nil {
		return printError(stdout, err)
	}
	api, err := cf.connect(ctx, name, stderr)
	if err != nil {
		return printError(stdout, err)
	}
	defer api.Close()
	// Only a call that waits may be answered: say so before publishing.
	if st, seq, h, err := readAnswerState(ctx, api, a.Session, a.CallID); err != nil {
		return printError(stdout, err)
	} else if st != stateWaiting {
		return printError(stdout, notWaiting(a.Session, a.CallID, st, seq, h))
	}
	// The console publishes its answers through the same function.
	rc, err := api.SubmitApproval(ctx, a)
	if err != nil {
		return printError(stdout, err)
	}
	if *wait <= 0 {
		// Not waited for: the answer is judged when a tool worker takes
		// the session (one may not run now).
		if *asJSON {
			_ = writeJSON(stdout, answerOutcome{Approval: a, Subject: rc.Subject, Outcome: "published"})
			return exitOK
		}
		fmt.Fprintf(stdout, "%s call %s in session %s (signer %s), published on %s; not waited for: the session's tool worker judges it\n", d, a.CallID, a.Session, a.Signer, rc.Subject)
		return exitOK
	}
	out, err := awaitAnswer(ctx, api, a, *wait, cf.nats.authDir())
	out.Subject = rc.Subject
	if err != nil {
		st := printError(stdout, err)
		fmt.Fprintf(stderr, "jingwei %s: published on %s, not honoured: %s\n", name, rc.Subject, schema.TextOf(err))
		return st
	}
	if *asJSON {
		_ = writeJSON(stdout, out)
		return exitOK
	}
	effect := "approval.granted recorded: the call's body runs"
	if d == schema.Denied {
		effect = "the call ended rejected at stage approval: its body never runs"
	}
	fmt.Fprintf(stdout, "%s call %s in session %s (signer %s), published on %s: accepted, %s (log seq %d)\n", d, a.CallID, a.Session, a.Signer, rc.Subject, effect, out.Seq)
	return exitOK
}

const taskHelp = `  jingwei task stop --session S --task T [--reason TEXT] [--json]

Stops a task (docs/protocol.md §17): the request is published on
jw.approvals.<session>.stop and the tool worker that owns the session (or
takes it) records task.stopped on the session log. From then on every new
call of the task is refused (answer task_stopped) without running or
counting, calls of it waiting for approval end rejected at stage approval,
and prepare refuses a plan for any call of the task (task_stopped). Nothing
reopens a stopped task, and its budget is never restored.

Output: one line; --json prints {"stop","stream","seq"} (and "conflict"
when another message held the stop's id).

Exit status: 0 published; 1 unexpected failure; 2 usage; 3 refused
(permission_denied: the credentials may not publish stops, role host);
4 the server is unreachable.`

func runTask(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "stop" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(stdout, taskHelp)
			return exitOK
		}
		return usageError(stderr, "task", "want: jingwei task stop --session S --task T")
	}
	fs := newFlags("task stop", "Stop a task.", taskHelp, stderr)
	var cf clientFlags
	cf.register(fs, 10*time.Second)
	session := fs.String("session", "", "session id (required)")
	task := fs.String("task", "", "task to stop (required)")
	reason := fs.String("reason", "", "why")
	asJSON := fs.Bool("json", false, "print the stored stop as JSON")
	if st, ok := parseFlags(fs, args[1:]); !ok {
		return st
	}
	req := schema.StopRequest{V: schema.Version, Session: *session, Task: *task, Reason: *reason, At: time.Now().UTC().Format(time.RFC3339)}
	if err := req.Validate(); err != nil {
		return usageError(stderr, "task stop", "%s", schema.TextOf(err))
	}
	api, err := cf.connect(ctx, "task", stderr)
	if err != nil {
		return printError(stdout, err)
	}
	defer api.Close()
	js, err := jetstream.New(api.nc)
	if err != nil {
		return printError(stdout, err)
	}
	pctx, cancel := context.WithTimeout(ctx, api.timeout)
	defer cancel()
	var ack *jetstream.PubAck
	err = api.Guard(pctx, []string{stream.StopSubject(api.prefix, req.Session)}, func(ctx context.Context) error {
		var err error
		ack, err = stream.PublishStop(ctx, js, api.prefix, req)
		return err
	})
	if err != nil && ack == nil {
		return printError(stdout, err)
	}
	if err != nil { // stored, but another message held the stop's Msg-Id
		fmt.Fprintf(stderr, "jingwei task stop: %s\n", schema.TextOf(err))
	}
	if *asJSON {
		out := taskStopOutput{Stop: req, Stream: ack.Stream, Seq: ack.Sequence}
		if err != nil {
			b := schema.NewErrorBody(err)
			out.Conflict = &b.Error
		}
		_ = writeJSON(stdout, out)
		return exitOK
	}
	fmt.Fprintf(stdout, "stop of task %s in session %s published (%s seq %d); the session's tool worker records task.stopped\n", req.Task, req.Session, ack.Stream, ack.Sequence)
	return exitOK
}

// taskStopOutput is what task stop prints with --json.
type taskStopOutput struct {
	Stop schema.StopRequest `json:"stop"`
	// Stream and Seq locate the stored stop in JW_APPROVALS.
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	// Conflict is set when another stop held the stop's Msg-Id
	// (request_conflict): the stop was stored under another id.
	Conflict *schema.ErrorDetail `json:"conflict,omitempty"`
}

// approvalFlags are a tool worker's approval settings (worker, serve).
type approvalFlags struct {
	trustApprovers string
	require        multiFlag
	timeout        time.Duration
	stopExhausted  bool
	failAfterWrite int
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func (a *approvalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.trustApprovers, "trust-approvers", envOr("JINGWEI_TRUST_APPROVERS", ""), "file of approver public keys whose signed approvals and denials this worker honours, one per line with the person's name (default <auth dir>/approvers when it exists; env JINGWEI_TRUST_APPROVERS)")
	fs.Var(&a.require, "require-approval", "a tool whose calls wait for a signed approval: TOOL, or TOOL:FIELD>N for calls whose numeric argument FIELD is above N (e.g. payments.charge:amount_cents>100000); repeatable")
	fs.DurationVar(&a.timeout, "approval-timeout", worker.DefaultApprovalTimeout, "how long a call waits for approval before it ends rejected at stage approval")
	fs.IntVar(&a.failAfterWrite, "fail-after-write", 0, "the first N orders.create runs write their order and then fail, retryable (demos and the reference scenario)")
	fs.BoolVar(&a.stopExhausted, "stop-exhausted-tasks", false, "a call refused for an exhausted tool_calls budget also stops its task (task.stopped by budget)")
}

// rules parses --require-approval into rules by tool name.
func (a *approvalFlags) rules() (map[string]*worker.ApprovalRule, error) {
	if a.timeout <= 0 {
		return nil, errors.New("--approval-timeout must be positive")
	}
	out := map[string]*worker.ApprovalRule{}
	for _, spec := range a.require {
		tool, cond, hasCond := strings.Cut(spec, ":")
		rule := &worker.ApprovalRule{Timeout: a.timeout}
		if hasCond {
			field, limit, ok := strings.Cut(cond, ">")
			n, err := strconv.ParseFloat(limit, 64)
			if !ok || field == "" || err != nil {
				return nil, fmt.Errorf("--require-approval %q: want TOOL or TOOL:FIELD>NUMBER", spec)
			}
			rule.When = func(args json.RawMessage) bool {
				v, ok := numberAt(args, field)
				// A missing or non-numeric field is not "small": it asks.
				return !ok || v > n
			}
		}
		if tool == "" {
			return nil, fmt.Errorf("--require-approval %q: no tool", spec)
		}
		out[tool] = rule
	}
	return out, nil
}

// approvers reads the trusted approver keys: --trust-approvers, else
// <auth dir>/approvers when it exists, else none (every waiting call then
// times out).
func (a *approvalFlags) approvers(n *natsFlags) (recovery.TrustedKeys, string, error) {
	file := a.trustApprovers
	if file == "" {
		dir := n.authDir()
		if dir == "" {
			return nil, "", nil
		}
		file = filepath.Join(dir, "approvers")
		if _, err := os.Stat(file); err != nil {
			return nil, "", nil
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, file, err
	}
	t, err := recovery.ParseTrustedKeys(b)
	return t, file, err
}

// apply sets the rules on the tools they name; a rule for a tool that is
// not registered is an error.
func applyApprovalRules(list []worker.Tool, rules map[string]*worker.ApprovalRule) ([]worker.Tool, error) {
	seen := map[string]bool{}
	for i := range list {
		if r, ok := rules[list[i].Metadata.Name]; ok {
			list[i].Approval = r
			seen[list[i].Metadata.Name] = true
		}
	}
	for name := range rules {
		if !seen[name] {
			return nil, fmt.Errorf("--require-approval: no tool %q", name)
		}
	}
	return list, nil
}

// numberAt returns the number at a dotted path of a JSON object.
func numberAt(doc []byte, path string) (float64, bool) {
	cur := json.RawMessage(doc)
	for _, key := range strings.Split(path, ".") {
		var m map[string]json.RawMessage
		if json.Unmarshal(cur, &m) != nil {
			return 0, false
		}
		v, ok := m[key]
		if !ok {
			return 0, false
		}
		cur = v
	}
	var n json.Number
	if json.Unmarshal(cur, &n) != nil {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// approverKeyFile is the approver key 'jingwei serve' makes in its data
// directory.
const approverKeyFile = "approver.nk"

// serveApproverName is the name the approvers file gives serve's own
// approver key: the deployment's operator approving from the command line.
const serveApproverName = "serve operator (approver.nk)"

// serveApprovers makes (once) serve's approver key in data and trusts it,
// with the keys of --trust-approvers, for serve's tool worker; it also
// lists it in <authDir>/approvers, so that tool workers started with
// --auth trust it too. It returns the key file and its public key.
func serveApprovers(data, authDir string, tf *toolFlags) (string, string, error) {
	keyPath := filepath.Join(data, approverKeyFile)
	pub, _, err := ensureReviewerKey(keyPath)
	if err != nil {
		return "", "", err
	}
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		return "", "", err
	}
	if tf.approvals.trustApprovers != "" {
		b, err := os.ReadFile(tf.approvals.trustApprovers)
		if err != nil {
			return "", "", fmt.Errorf("--trust-approvers: %w", err)
		}
		more, err := recovery.ParseTrustedKeys(b)
		if err != nil {
			return "", "", fmt.Errorf("--trust-approvers %s: %w", tf.approvals.trustApprovers, err)
		}
		for k := range more {
			trusted[k] = struct{}{}
		}
	}
	tf.approvers = trusted
	list := filepath.Join(authDir, "approvers")
	if b, err := os.ReadFile(list); err != nil || !strings.Contains(string(b), pub) {
		if err := os.MkdirAll(authDir, 0o700); err != nil {
			return "", "", err
		}
		f, err := os.OpenFile(list, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return "", "", err
		}
		// Named, as every trust line is (recovery.ParseNamedKeys): the
		// verdicts signed with serve's own key say whose they are.
		_, err = fmt.Fprintln(f, pub, serveApproverName)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", "", err
		}
	}
	return keyPath, pub, nil
}

// printApprovalStatus prints the calls waiting for approval and the
// stopped tasks of a status (jingwei status).
func printApprovalStatus(tw io.Writer, st service.Status) {
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "AWAITING APPROVAL (%d)\n", len(st.AwaitingApproval))
	if len(st.AwaitingApproval) > 0 {
		fmt.Fprintln(tw, "SESSION\tCALL\tTOOL\tTASK\tDEADLINE\tSEQ")
		for _, a := range st.AwaitingApproval {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", a.Session, a.CallID, a.Tool, orDash(a.Task), a.Deadline.Format(time.RFC3339), a.Seq)
		}
	}
	if len(st.StoppedTasks) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "STOPPED TASKS (%d)\n", len(st.StoppedTasks))
		fmt.Fprintln(tw, "SESSION\tTASK\tBY\tREASON\tAT")
		for _, s := range st.StoppedTasks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Session, s.Task, s.By, orDash(s.Reason), s.At.Format(time.RFC3339))
		}
	}
}
