package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker/service"
)

// errorCode returns the code of the error body on stdout ("" for none).
func errorCode(stdout string) string {
	e, ok := schema.DecodeErrorBody([]byte(strings.TrimSpace(stdout)))
	if !ok {
		return ""
	}
	return string(e.Code)
}

// TestAnswersTellTheTruth runs the CLI against a live serve, as its user
// would, and a plain NATS client with the agent's credentials:
//   - approve/deny refuse a call that does not wait (nothing published),
//     report an untrusted signer's answer as refused, and a trusted one as
//     accepted with its effect;
//   - retry with the agent's key fails at once with permission_denied
//     naming the subject and the role, not after its timeout as busy;
//   - jw.api.status {"Session":"x y"} is bad_request, not the fleet's
//     status;
//   - status --session of an unknown session exits 3 unknown_session.
func TestAnswersTellTheTruth(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	url, serveErr, _ := startServe(t, dir, "--require-approval", "payments.charge:amount_cents>1000")
	auth := filepath.Join(dir, "auth")
	key := filepath.Join(dir, approverKeyFile)
	base := []string{"--server", url, "--auth", auth}

	// A case variant of a member is no member: refused, as the contract says.
	agent := connectRole(t, url, dir, access.RoleAgent)
	defer agent.Close()
	awaitServices(t, agent)
	m, err := agent.Request("jw.api.status", []byte(`{"Session":"x y"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := service.AnswerCode(m); code != string(schema.CodeBadRequest) || m.Header.Get(micro.ErrorCodeHeader) != "400" {
		t.Fatalf(`jw.api.status {"Session":"x y"}: %q %q %s, want bad_request (400)`, code, m.Header.Get(micro.ErrorCodeHeader), m.Data)
	}

	// An unknown session: exit 3, unknown_session, for status and export.
	for _, cmd := range []string{"status", "export"} {
		code, stdout, stderr := runCLI(append([]string{cmd, "--session", "nobody-here"}, base...)...)
		if code != exitRefused || errorCode(stdout) != string(schema.CodeUnknownSession) {
			t.Errorf("%s --session nobody-here: exit %d %q %q, want 3 unknown_session", cmd, code, stdout, stderr)
		}
	}

	// retry with the agent's key: the server refuses the publish; the CLI
	// says so at once.
	t0 := time.Now()
	code, stdout, stderr := runCLI("retry", "--server", url, "--nkey", filepath.Join(auth, "agent.nk"), "--session", "s-1", "--call", "c-1", "--timeout", "20s")
	if took := time.Since(t0); code != exitRefused || errorCode(stdout) != string(schema.CodePermissionDenied) || took > 5*time.Second ||
		!strings.Contains(stdout, "jw.api.prepare") || !strings.Contains(stdout, "role host") {
		t.Errorf("retry with the agent key: exit %d after %s %q %q, want 3 permission_denied naming jw.api.prepare and role host at once", code, took, stdout, stderr)
	}

	// No call waits: approve refuses, nothing published.
	code, stdout, _ = runCLI(append([]string{"approve", "--session", "pay-1", "--call", "c-none", "--approver", "alice@finance", "--key", key}, base...)...)
	if code != exitRefused || errorCode(stdout) != string(schema.CodeNotWaiting) {
		t.Errorf("approve of no waiting call: exit %d %q, want 3 not_waiting", code, stdout)
	}

	requestCall(t, url, dir, "pay-1", "r-1", tools.PaymentsCharge, `{"account":"acct-1","amount_cents":250000}`)
	call := waitingCall(t, url, dir, "pay-1")

	// An untrusted signer: published, refused by the tool worker, said so.
	stranger := filepath.Join(t.TempDir(), "stranger.nk")
	if c, _, e := runCLI("keys", "new", "--out", stranger); c != exitOK {
		t.Fatalf("keys new: %s", e)
	}
	code, stdout, stderr = runCLI(append([]string{"approve", "--session", "pay-1", "--call", call, "--approver", "mallory", "--key", stranger, "--wait", "2s"}, base...)...)
	if code != exitRefused || errorCode(stdout) != string(schema.CodeInvalidApproval) || !strings.Contains(stdout, "is not in "+filepath.Join(auth, "approvers")) {
		t.Errorf("approve with an untrusted key: exit %d %q %q, want 3 invalid_approval (not in the approvers file)", code, stdout, stderr)
	}

	// The agent's credentials may read the log but not publish answers nor
	// stops: said at once, permission_denied, nothing waits out a timeout.
	agentKey := filepath.Join(auth, "agent.nk")
	for _, args := range [][]string{
		{"approve", "--session", "pay-1", "--call", call, "--approver", "alice@finance", "--key", key},
		{"task", "stop", "--session", "pay-1", "--task", "t-1"},
	} {
		t0 := time.Now()
		code, stdout, stderr := runCLI(append(args, "--server", url, "--nkey", agentKey, "--timeout", "20s")...)
		if took := time.Since(t0); code != exitRefused || errorCode(stdout) != string(schema.CodePermissionDenied) || took > 5*time.Second || !strings.Contains(stdout, "jw.approvals.pay-1") {
			t.Errorf("%s with the agent key: exit %d after %s %q %q, want 3 permission_denied naming jw.approvals.pay-1 at once", args[0], code, took, stdout, stderr)
		}
	}

	// A trusted signer: accepted, with the effect on the log.
	code, stdout, stderr = runCLI(append([]string{"approve", "--session", "pay-1", "--call", call, "--approver", "alice@finance", "--key", key, "--json"}, base...)...)
	var out answerOutcome
	if code != exitOK || json.Unmarshal([]byte(stdout), &out) != nil || out.Outcome != "accepted" || out.Seq == 0 {
		t.Fatalf("approve with serve's key: exit %d %q %q (%s)", code, stdout, stderr, serveErr)
	}
	// Answered: a second answer is refused before publishing.
	code, stdout, _ = runCLI(append([]string{"deny", "--session", "pay-1", "--call", call, "--approver", "alice@finance", "--key", key}, base...)...)
	if code != exitRefused || errorCode(stdout) != string(schema.CodeNotWaiting) || !strings.Contains(stdout, "approved already") {
		t.Errorf("deny after approval: exit %d %q, want 3 not_waiting (approved already)", code, stdout)
	}

	// A denial: accepted, the call ends rejected at stage approval.
	requestCall(t, url, dir, "pay-2", "r-1", tools.PaymentsCharge, `{"account":"acct-2","amount_cents":990000}`)
	call2 := waitingCall(t, url, dir, "pay-2")
	code, stdout, stderr = runCLI(append([]string{"deny", "--session", "pay-2", "--call", call2, "--approver", "alice@finance", "--reason", "no PO", "--key", key}, base...)...)
	if code != exitOK || !strings.Contains(stdout, "accepted") || !strings.Contains(stdout, "rejected at stage approval") {
		t.Errorf("deny: exit %d %q %q", code, stdout, stderr)
	}

	// task stop --json prints the stored stop.
	code, stdout, stderr = runCLI(append([]string{"task", "stop", "--session", "pay-2", "--task", "t-1", "--json"}, base...)...)
	var stop taskStopOutput
	if code != exitOK || json.Unmarshal([]byte(stdout), &stop) != nil || stop.Seq == 0 || stop.Stop.Task != "t-1" {
		t.Errorf("task stop --json: exit %d %q %q", code, stdout, stderr)
	}
}

// TestConsoleTakesCreds: the console accepts --creds as every other
// command does, and connects with it (a role without its own flags): a
// file that is not there is named in the connection's failure, not
// refused as an unknown flag.
func TestConsoleTakesCreds(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nobody.creds")
	code, _, stderr := runCLI("console", "--server", "nats://127.0.0.1:1", "--creds", missing, "--listen", "127.0.0.1:0", "--timeout", "1s")
	if code == exitUsage || code == exitOK || !strings.Contains(stderr, missing) {
		t.Errorf("console --creds: exit %d %q, want a connection failure naming %s", code, stderr, missing)
	}
}

// TestCallWaitingForApprovalSaysSo: a call parked for approval is
// answered approval_pending (with its call id) when the gateway's time is
// up, not result_pending nor "busy"; the CLI exits 3 with that code.
func TestCallWaitingForApprovalSaysSo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	url, _, _ := startServe(t, dir, "--require-approval", "payments.charge:amount_cents>1000", "--call-timeout", "1s")
	agent := connectRole(t, url, dir, access.RoleAgent)
	defer agent.Close()
	body := `{"v":1,"request_id":"r-1","session":"wait-1","task":"t-1","tool":"payments.charge","arguments":{"account":"acct-1","amount_cents":250000}}`
	// The first ask may end before the tool worker took the session and
	// parked the call (result_pending); asking again with the same
	// request id finds it waiting.
	var m *nats.Msg
	streamtest.Eventually(t, 30*time.Second, "jw.api.call answers approval_pending", func() bool {
		var err error
		m, err = agent.Request("jw.api.call", []byte(body), 10*time.Second)
		return err == nil && service.AnswerCode(m) == string(schema.CodeApprovalPending)
	})
	e := service.AnswerError(m)
	if e == nil || e.Code != schema.CodeApprovalPending || e.CallID == "" || m.Header.Get(micro.ErrorCodeHeader) != "409" {
		t.Fatalf("a call waiting for approval: %v %s", e, m.Data)
	}
	code, stdout, stderr := runCLI("call", "--server", url, "--auth", filepath.Join(dir, "auth"), "--session", "wait-1", "--task", "t-1", "--request-id", "r-1",
		"--tool", tools.PaymentsCharge, "--args", `{"account":"acct-1","amount_cents":250000}`)
	if code != exitRefused || errorCode(stdout) != string(schema.CodeApprovalPending) || strings.Contains(stdout+stderr, "busy") {
		t.Errorf("jingwei call of a waiting call: exit %d %q %q, want 3 approval_pending", code, stdout, stderr)
	}
}

// TestUnreachableAnswersFast: with the default 10 s --timeout, a server
// that is not there is reported within about 2 s, as unreachable (exit 4),
// by a service client and by a direct reader alike.
func TestUnreachableAnswersFast(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--server", "nats://127.0.0.1:1"},
		{"export", "--server", "nats://127.0.0.1:1", "--session", "s-1"},
		{"approve", "--server", "nats://127.0.0.1:1", "--session", "s-1", "--call", "c-1", "--approver", "a", "--key", writeFile(t, "a.nk", newSeed(t))},
	} {
		t0 := time.Now()
		code, stdout, stderr := runCLI(args...)
		if took := time.Since(t0); code != exitUnreachable || errorCode(stdout) != string(schema.CodeUnreachable) || took > 4*time.Second {
			t.Errorf("%s against no server: exit %d after %s %q %q, want 4 unreachable within ~2s", args[0], code, took, stdout, stderr)
		}
	}
}

// TestServeRenamesTheLegacyReviewerKey: a data directory of an older serve
// keeps its trusted review-signing key, under its new name.
func TestServeRenamesTheLegacyReviewerKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b := []byte(newSeed(t))
	if err := os.WriteFile(filepath.Join(dir, legacyReviewerKeyFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, serveErr, stop := startServe(t, dir, "--no-worker")
	stop()
	got, err := os.ReadFile(filepath.Join(dir, reviewerKeyFile))
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("%s after serve: %v (%s)", reviewerKeyFile, err, serveErr)
	}
	if _, err := os.Stat(filepath.Join(dir, legacyReviewerKeyFile)); err == nil {
		t.Errorf("%s still there next to %s", legacyReviewerKeyFile, reviewerKeyFile)
	}
}

// awaitServices waits until both services of a fresh serve answer on nc:
// serve prints its URL before the recovery worker and the tool worker
// have registered their endpoints.
func awaitServices(t *testing.T, nc *nats.Conn) {
	t.Helper()
	streamtest.Eventually(t, 30*time.Second, "jw.api.status and jw.api.call answer", func() bool {
		for _, subj := range []string{"jw.api.status", "jw.api.call"} {
			if _, err := nc.Request(subj, []byte(`{}`), 5*time.Second); err != nil {
				return false
			}
		}
		return true
	})
}
