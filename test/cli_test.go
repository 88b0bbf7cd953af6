package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// jingweiBinary builds ./cmd/jingwei once per test binary and returns its
// path.
func jingweiBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		removeStaleBinaries()
		dir, err := os.MkdirTemp("", "jingwei-test-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "jingwei")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/jingwei").CombinedOutput()
		if err != nil {
			binErr = errors.New("go build ./cmd/jingwei: " + err.Error() + "\n" + string(out))
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// removeStaleBinaries removes the binaries earlier test runs left behind
// (a package has no hook after its last test without a TestMain); those
// younger than an hour may belong to a run in progress and stay.
func removeStaleBinaries() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "jingwei-test-bin-*"))
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && time.Since(st.ModTime()) > time.Hour {
			_ = os.RemoveAll(d)
		}
	}
}

// serveProc is a `jingwei serve` process on a free port with its own data
// directory.
type serveProc struct {
	url  string
	data string
	cmd  *exec.Cmd
	done chan struct{}
}

// startServe starts `jingwei serve` and waits until it listens; it is
// stopped (SIGTERM, then SIGKILL) at the end of the test.
func startServe(t *testing.T, bin string, extra ...string) *serveProc {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data") // serve makes it 0700
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:-1", "--data", data, "--sync", "interval", "--log-format", "json", "--log-level", "warn"}, extra...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{data: data, cmd: cmd, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`listening on (nats://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
			t.Errorf("jingwei serve did not stop within 15s of SIGTERM")
		}
	})
	select {
	case p.url = <-urls:
	case <-p.done:
		t.Fatalf("jingwei serve exited: %s", stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("jingwei serve did not listen within 20s: %s", stderr.String())
	}
	return p
}

// cliResult is one run of the CLI.
type cliResult struct {
	code           int
	stdout, stderr string
}

// errorCode returns the code of {"error":{"code":…}} on stdout ("" if none).
func (r cliResult) errorCode() string {
	for _, line := range strings.Split(r.stdout, "\n") {
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(line), &body) == nil && body.Error.Code != "" {
			return body.Error.Code
		}
	}
	return ""
}

// jw runs the CLI with NATS_URL set to url (empty: unset).
func jw(t *testing.T, bin, url string, args ...string) cliResult {
	t.Helper()
	return jwAuth(t, bin, url, "", args...)
}

// auth returns the directory of the serve's role credentials.
func (p *serveProc) auth() string { return filepath.Join(p.data, "auth") }

// jwAuth runs the CLI with NATS_URL set to url and JINGWEI_AUTH to auth
// (the role credentials of a serve; empty: unset).
func jwAuth(t *testing.T, bin, url, auth string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "NATS_URL="+url, "JINGWEI_LOG_LEVEL=warn", "JINGWEI_AUTH="+auth)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("jingwei %v: %v", args, err)
	}
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// want checks the exit status and, for a refusal, the error code.
func (r cliResult) want(t *testing.T, what string, code int, errCode string) {
	t.Helper()
	if r.code != code || r.errorCode() != errCode {
		t.Fatalf("%s: exit %d, error code %q; want exit %d, code %q\nstdout: %s\nstderr: %s", what, r.code, r.errorCode(), code, errCode, r.stdout, r.stderr)
	}
}

// openUncertainPayment records, as a crashed writer would have, a
// payments.charge call that timed out: uncertain, non-idempotent, so it
// needs a review.
func openUncertainPayment(t *testing.T, srv *serveProc, session, callID string) {
	t.Helper()
	ctx := context.Background()
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: srv.url, NKeySeedFile: access.KeyDir(srv.auth()).SeedFile(access.RoleWorker)})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := topo.Leases().AcquireLease(ctx, session, "test-writer")
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Logs().Fence(ctx, session, "test-writer", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	contract := effect.Contract{Effect: effect.NonIdempotent, Revision: tools.PaymentsRevision}
	for _, ev := range []schema.Event{
		{Type: schema.TypeCall, Call: &schema.Call{CallID: callID, Tool: tools.PaymentsCharge, Arguments: json.RawMessage(`{"account":"acct-1","amount_cents":500}`),
			StartMarker: true, Operation: &schema.Operation{Task: "t-1", Key: "op-" + callID, Contract: contract}}},
		{Type: schema.TypeStarted, Started: &schema.Started{CallID: callID}},
		{Type: schema.TypeResult, Result: &schema.Result{CallID: callID, Status: schema.StatusTimeout}},
	} {
		if _, err := lg.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCLI runs every client command against a `jingwei serve` process:
// success, usage and refusal paths with their exit status and error code.
func TestCLI(t *testing.T) {
	bin := jingweiBinary(t)
	srv := startServe(t, bin)
	url := srv.url
	dir := t.TempDir()
	trustedKey := filepath.Join(srv.data, "review-signer.nk")
	cli := func(args ...string) cliResult {
		t.Helper()
		return jwAuth(t, bin, url, srv.auth(), args...)
	}

	// keys
	untrusted := filepath.Join(dir, "intruder.nk")
	r := cli("keys", "new", "--out", untrusted)
	r.want(t, "keys new", 0, "")
	if st, err := os.Stat(untrusted); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, st.Mode())
	}
	pub := strings.TrimSpace(r.stdout)
	if !regexp.MustCompile(`^U[A-Z0-9]{55}$`).MatchString(pub) {
		t.Fatalf("keys new printed %q, want a user public key", pub)
	}
	cli("keys", "new", "--out", untrusted).want(t, "keys new over an existing file", 2, "")
	if r := cli("keys", "pub", "--key", untrusted, "--json"); r.code != 0 || !strings.Contains(r.stdout, pub) {
		t.Fatalf("keys pub: %+v", r)
	}
	cli("keys", "pub", "--key", filepath.Join(dir, "missing.nk")).want(t, "keys pub of a missing file", 2, "")
	cli("keys", "rotate").want(t, "keys with an unknown subcommand", 2, "")

	// call
	r = cli("call", "--session", "cli-1", "--task", "t-1", "--tool", tools.OrdersCreate, "--args", `{"sku":"A-1","qty":1}`, "--request-id", "r-cli-1", "--json")
	r.want(t, "call orders.create", 0, "")
	var ev schema.Event
	if err := json.Unmarshal([]byte(r.stdout), &ev); err != nil || ev.Result == nil || ev.Result.Status != schema.StatusOK {
		t.Fatalf("call --json printed %q (%v), want an ok tool.result", r.stdout, err)
	}
	orderCall := ev.Result.CallID
	r = cli("call", "--session", "cli-1", "--task", "t-1", "--tool", tools.OrdersCreate, "--args", `{"sku":"A-1","qty":1}`, "--request-id", "r-cli-1")
	r.want(t, "call with the same request id", 0, "")
	if !strings.Contains(r.stdout, orderCall) {
		t.Fatalf("the same request id ran again: %s (want call %s)", r.stdout, orderCall)
	}
	cli("call", "--session", "cli-1", "--tool", tools.OrdersCreate, "--args", `{"sku":"A-1","qty":0}`, "--json").want(t, "call --json with arguments the schema refuses", 3, "rejected")
	if r := cli("call", "--session", "cli-1", "--tool", tools.OrdersCreate, "--args", `{"sku":"A-1","qty":0}`); r.code != 3 || !strings.Contains(r.stdout, "rejected at arguments") {
		t.Fatalf("call with arguments the schema refuses (text): exit %d, stdout %q; want exit 3 naming the stage", r.code, r.stdout)
	}
	cli("call", "--session", "cli-1", "--tool", tools.OrdersCreate, "--args", `{"sku":`).want(t, "call with --args not JSON", 2, "")
	cli("call", "--session", "bad session", "--tool", tools.OrdersCreate).want(t, "call with an invalid session", 2, "")
	cli("call", "--session", "cli-1").want(t, "call without --tool", 2, "")

	// retry
	cli("retry", "--session", "cli-1", "--call", orderCall).want(t, "retry of a completed call", 3, "completed")
	cli("retry", "--session", "cli-1", "--call", "c-nope").want(t, "retry of an unknown call", 3, "unknown_call")
	cli("retry", "--session", "cli-1").want(t, "retry without --call", 2, "")

	// An uncertain payment: needs a review.
	openUncertainPayment(t, srv, "cli-pay", "c-pay-1")
	openUncertainPayment(t, srv, "cli-pay", "c-pay-2")
	cli("retry", "--session", "cli-pay", "--call", "c-pay-1").want(t, "retry of an uncertain payment", 3, "needs_review")

	// status
	// Poll: the recovery worker classifies asynchronously.
	streamtest.Eventually(t, 20*time.Second, "status listing both payments as awaiting review", func() bool {
		r = cli("status", "--session", "cli-pay", "--json")
		r.want(t, "status --json", 0, "")
		return strings.Contains(r.stdout, `"c-pay-1"`) && strings.Contains(r.stdout, `"c-pay-2"`)
	})
	r = cli("status")
	r.want(t, "status", 0, "")
	for _, s := range []string{"OPEN CALLS", "AWAITING REVIEW (2)", "PLANS (issued 0, consumed 0)", "c-pay-1"} {
		if !strings.Contains(r.stdout, s) {
			t.Fatalf("status output lacks %q:\n%s", s, r.stdout)
		}
	}
	cli("status", "--session", "no/such").want(t, "status with an invalid session", 2, "")
	watchStatus(t, bin, url, srv.auth())

	// review: an untrusted key changes nothing.
	review := func(call, verdict, key string, extra ...string) cliResult {
		args := append([]string{"review", "--session", "cli-pay", "--call", call, "--verdict", verdict, "--evidence", "ledger query 42", "--operator", "alice@ops", "--key", key}, extra...)
		return cli(args...)
	}
	r = review("c-pay-1", "not_executed", untrusted, "--json")
	r.want(t, "review signed with an untrusted key (published, ignored)", 3, "invalid_review")
	if !strings.Contains(r.stdout, "not trusted") || !strings.Contains(r.stdout, "JW_REVIEWS seq") {
		t.Fatalf("untrusted review: the refusal should say it was published and why it is ignored: %q", r.stdout)
	}
	cli("retry", "--session", "cli-pay", "--call", "c-pay-1").want(t, "retry after an untrusted review", 3, "needs_review")

	// A trusted not_executed review lets the payment be planned.
	r = review("c-pay-1", "not_executed", trustedKey)
	r.want(t, "trusted review not_executed", 0, "")
	if !strings.Contains(r.stdout, "jingwei retry --session cli-pay --call c-pay-1") {
		t.Fatalf("review output does not say what to do next:\n%s", r.stdout)
	}
	r = cli("retry", "--session", "cli-pay", "--call", "c-pay-1", "--json")
	r.want(t, "retry after a trusted not_executed review", 0, "")
	var plan schema.Plan
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || plan.Basis != schema.BasisReviewedNotExecuted || plan.PriorCallID != "c-pay-1" || plan.Review == nil {
		t.Fatalf("retry --json: %q (%v)", r.stdout, err)
	}

	// A trusted completed review refuses the retry for good.
	review("c-pay-2", "completed", trustedKey).want(t, "trusted review completed", 0, "")
	r = cli("retry", "--session", "cli-pay", "--call", "c-pay-2")
	r.want(t, "retry after a completed review", 3, "completed")
	// completed is final: a later not_executed review is refused as a
	// conflict, and the retry stays refused.
	review("c-pay-2", "not_executed", trustedKey).want(t, "not_executed after completed", 3, "review_conflict")
	cli("retry", "--session", "cli-pay", "--call", "c-pay-2").want(t, "retry after a conflicting review", 3, "completed")
	// A client without credentials gets nothing from the server.
	if r := jw(t, bin, url, "status"); r.code != 1 || !strings.Contains(r.stdout, "Authorization Violation") || !strings.Contains(r.stdout, "--auth DIR") {
		t.Fatalf("status without credentials: %+v", r)
	}

	// review refusals and usage errors.
	review("c-nope", "not_executed", trustedKey).want(t, "review of an unknown call", 3, "unknown_call")
	review("c-pay-1", "maybe", trustedKey).want(t, "review with an unknown verdict", 2, "")
	review("c-pay-1", "completed", filepath.Join(dir, "missing.nk")).want(t, "review with a missing key file", 2, "")
	review("c-pay-1", "completed", trustedKey, "--operator", strings.Repeat("x", 1025)).want(t, "review with an operator over 1,024 bytes", 3, "field_too_long")
	cli("review", "--session", "cli-pay", "--call", "c-pay-1").want(t, "review without a verdict", 2, "")

	// Flags and help.
	for _, c := range []string{"call", "review", "retry", "status", "keys", "demo"} {
		if r := cli("help", c); r.code != 0 || r.stderr == "" {
			t.Errorf("help %s: exit %d, no help text", c, r.code)
		}
		cli(c, "--no-such-flag").want(t, c+" with an unknown flag", 2, "")
	}
}

// TestCLINoService checks the failure when a server runs but no jingwei
// service answers: exit 1, code internal, a message saying what to start.
func TestCLINoService(t *testing.T) {
	bin := jingweiBinary(t)
	srv, err := natsnode.StartEmbedded(context.Background(), natsnode.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, args := range [][]string{
		{"status"},
		{"retry", "--session", "s-1", "--call", "c-1"},
		{"call", "--session", "s-1", "--tool", tools.CatalogLookup, "--args", `{"sku":"A-1"}`},
	} {
		r := jw(t, bin, srv.ClientURL(), args...)
		r.want(t, strings.Join(args, " ")+" without a service", 1, "internal")
		if !strings.Contains(r.stdout, "jingwei serve") {
			t.Errorf("%v: the error does not say what to start: %s", args, r.stdout)
		}
	}
}

// watchStatus runs `status --watch` until it has refreshed twice, then
// interrupts it: it stops cleanly with exit status 0.
func watchStatus(t *testing.T, bin, url, auth string) {
	t.Helper()
	cmd := exec.Command(bin, "status", "--watch", "--interval", "100ms", "--server", url, "--auth", auth)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	refreshed := make(chan struct{})
	go func() {
		n := 0
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "OPEN CALLS") {
				if n++; n == 2 {
					close(refreshed)
				}
			}
		}
	}()
	select {
	case <-refreshed:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("status --watch did not refresh twice within 20s")
	}
	_ = cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("status --watch after SIGINT: %v, want exit status 0", err)
	}
}
