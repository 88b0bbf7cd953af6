package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/answer"
	"github.com/jingwei/jingwei/cmd/jingwei/internal/approval"
	"github.com/jingwei/jingwei/cmd/jingwei/internal/sessionlog"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/worker"
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
	load := func(ctx context.Context, session string) ([]schema.Event, error) {
		return sessionlog.Load(ctx, api.Client, session, schema.DefaultLimits)
	}
	if st, seq, h, err := answer.Read(ctx, load, a.Session, a.CallID); err != nil {
		return printError(stdout, err)
	} else if st != answer.Waiting {
		return printError(stdout, answer.NotWaiting(a.Session, a.CallID, st, seq, h))
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
	out, err := answer.Await(ctx, load, a, *wait, cf.nats.authDir())
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

// answerOutcome is what approve and deny print with --json.
type answerOutcome = answer.Outcome

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
	return approval.ParseRules(a.require, a.timeout)
}

// approvers reads the trusted approver keys: --trust-approvers, else
// <auth dir>/approvers when it exists, else none (every waiting call then
// times out).
func (a *approvalFlags) approvers(n *natsFlags) (recovery.TrustedKeys, string, error) {
	return approval.Approvers(a.trustApprovers, n.authDir())
}

// applyApprovalRules sets the rules on the tools they name; a rule for a
// tool that is not registered is an error.
var applyApprovalRules = approval.ApplyRules

// approverKeyFile is the approver key 'jingwei serve' makes in its data
// directory.
const approverKeyFile = "approver.nk"

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
	if tf.approvers, err = approval.ServeTrust(pub, tf.approvals.trustApprovers, authDir); err != nil {
		return "", "", err
	}
	return keyPath, pub, nil
}
