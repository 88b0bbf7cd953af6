package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jingwei/jingwei/demo"
	"github.com/jingwei/jingwei/schema"
)

// TestDemo runs `jingwei demo` as a process, in both endings of the story,
// and checks its final table and report: exactly one order record, the
// payment's verdict as the ledger shows it — signed by the recovery
// worker's prober (payments.lookup), not a person — the payment charged
// once; a second, slow payment that timed out while its writer held the
// session, which the probe could not decide (evidence only, still
// needs_review, its retry refused) and a person settled completed once the
// provider's late charge landed; and no child process left behind.
func TestDemo(t *testing.T) {
	bin := jingweiBinary(t)
	tests := []struct {
		name    string
		args    []string
		verdict schema.Verdict
		retry   string
	}{
		{"charge landed", nil, schema.VerdictCompleted, "refused (completed)"},
		{"charge lost", []string{"--payment-lost"}, schema.VerdictNotExecuted, string(schema.StatusOK)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			cmd := exec.CommandContext(ctx, bin, append([]string{"demo", "--json", "--log-level", "warn"}, tt.args...)...)
			cmd.Stdout, cmd.Stderr = &out, &errb
			start := time.Now()
			if err := cmd.Run(); err != nil {
				t.Fatalf("jingwei demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
			}
			took := time.Since(start)
			t.Logf("jingwei demo took %s", took.Round(time.Millisecond))
			if took > 30*time.Second {
				t.Errorf("jingwei demo took %s, want under 30s", took)
			}
			// With --json the story goes to stderr and stdout holds the
			// report alone, so `jingwei demo --json | jq` works.
			text := errb.String()

			// The final table, as a reader sees it.
			for _, want := range []string{
				`(?m)^order records:\s+1$`,
				`(?m)^ledger charges:\s+2$`,
				`(?m)^payment verdict:\s+` + string(tt.verdict) + `$`,
				`(?m)^payment settled by:\s+probe payments.lookup$`,
				`(?m)^probe\s+payments.lookup \(key U\S+\) for call c-\S+: .*\n\s+signs verdict ` + string(tt.verdict) + ` as a probe's review`,
				`(?m)^demo-orders\s+c-\S+\s+orders.create\s+idempotent\s+1\s+none \(killed\)\s+superseded`,
				`(?m)^demo-orders\s+c-\S+\s+orders.create\s+idempotent\s+2\s+ok\s+completed\s+refuse$`,
				`(?m)^demo-payments\s+c-\S+\s+payments.charge\s+non_idempotent\s+1\s+none \(killed\)`,
				`(?m)^CRASH\s+SIGKILL tool worker pid \d+`,
				// The undecided call: evidence only, still needs_review,
				// then a person.
				`(?m)^recover\s+c-\S+ payments.charge: uncertain \(evidence timeout\) -> needs_review`,
				`(?m)^probe\s+payments.lookup could not decide call c-\S+: probe payments.lookup answered unknown at fence epoch 0: .*a late charge could still land\n\s+evidence only \(uncertain\): the call still needs a person`,
				`(?m)^host\s+retry c-\S+: refused, needs_review \(the probe's evidence decides nothing\)`,
				`(?m)^review\s+demo-reviewer@ops checks the ledger: ledger TOOLS_LEDGER seq \d+: 4999 cents to acct-17 by call c-\S+\n\s+signs verdict completed`,
				`(?m)^demo-slow-payments\s+c-\S+\s+payments.charge\s+non_idempotent\s+1\s+timeout\s+uncertain\s+needs_review, review: completed$`,
				`(?m)^slow payment settled by:\s+person demo-reviewer@ops$`,
			} {
				if !regexp.MustCompile(want).MatchString(text) {
					t.Errorf("demo output does not match %s:\n%s", want, text)
				}
			}

			// The report: stdout is exactly one JSON document.
			var rep demo.Report
			dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rep); err != nil {
				t.Fatalf("stdout is not the JSON report: %v\n%s", err, out.String())
			}
			if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) != 0 || dec.More() {
				t.Fatalf("stdout holds more than the JSON report: %q", rest)
			}
			if rep.PaymentSettledBy != "probe payments.lookup" {
				t.Errorf("report: payment settled by %q, want the probe payments.lookup", rep.PaymentSettledBy)
			}
			if rep.Orders != 1 || rep.Charges != 2 || rep.PaymentVerdict != tt.verdict || rep.PaymentRetry != tt.retry {
				t.Errorf("report: orders %d, charges %d, verdict %s, payment retry %q; want 1, 2 (the payment's, the slow payment's), %s, %q", rep.Orders, rep.Charges, rep.PaymentVerdict, rep.PaymentRetry, tt.verdict, tt.retry)
			}
			if u := rep.Undecided; u == nil || u.Result != "timeout" || u.Decision != "needs_review" || u.ProbeVerdict != schema.VerdictUncertain ||
				!strings.Contains(u.ProbeEvidence, "a late charge could still land") || u.Verdict != schema.VerdictCompleted ||
				u.SettledBy != "person demo-reviewer@ops" || u.Retry != "refused (completed)" || u.Charges != 1 {
				t.Errorf("undecided payment: %+v; want a timeout, needs_review, the probe's uncertain evidence, a person's completed, retry refused, one charge", u)
			}
			attempts := map[string]int{}
			for _, c := range rep.Calls {
				attempts[c.Tool]++
			}
			wantPay := 1
			if tt.verdict == schema.VerdictNotExecuted {
				wantPay = 2
			}
			if attempts["orders.create"] != 2 || attempts["payments.charge"] != wantPay+1 {
				t.Errorf("attempts %v; want orders.create 2, payments.charge %d (and the slow payment's one)", attempts, wantPay)
			}
			// The story goes on with a payment that waits for
			// approval across a killed worker: a fourth child.
			if len(rep.Children) != 4 || rep.Killed == 0 {
				t.Errorf("children %v, killed %d; want 4 children, one killed", rep.Children, rep.Killed)
			}
			if ap := rep.Approval; ap == nil || ap.Result != "ok" || ap.Calls != 1 || ap.Granted != 1 || ap.Charges != 1 || ap.Killed == 0 {
				t.Errorf("approval part: %+v; want ok, 1 call, 1 approval honoured, 1 charge, a worker killed", ap)
			}
			for _, want := range []string{`(?m)^approve\s+demo-approver@finance approves call c-\S+`, `(?m)^CRASH\s+SIGKILL tool worker pid \d+ while the call waits for approval`} {
				if !regexp.MustCompile(want).MatchString(text) {
					t.Errorf("demo output does not match %s", want)
				}
			}
			for _, pid := range rep.Children {
				if alive(pid, bin) {
					t.Errorf("child process %d is still running after the demo", pid)
				}
			}
		})
	}
}

// TestDemoInterrupted stops `jingwei demo` with SIGINT in the middle of the
// story: it exits with a failure and leaves no child process running.
func TestDemoInterrupted(t *testing.T) {
	bin := jingweiBinary(t)
	cmd := exec.Command(bin, "demo", "--log-level", "warn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	pids := make(chan []int, 1)
	go func() {
		var seen []int
		sent := false
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			for _, m := range regexp.MustCompile(`pid (\d+)`).FindAllStringSubmatch(sc.Text(), -1) {
				n, _ := strconv.Atoi(m[1])
				seen = append(seen, n)
			}
			// Interrupt once the agent's requests are out: the recovery
			// worker and the tool worker are running.
			if !sent && strings.HasPrefix(sc.Text(), "agent") {
				_ = cmd.Process.Signal(os.Interrupt)
				sent = true
			}
		}
		pids <- seen
		done <- cmd.Wait()
	}()
	var seen []int
	select {
	case seen = <-pids:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("jingwei demo did not stop within 60s of SIGINT")
	}
	err = <-done
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("interrupted demo: %v, want exit status 1", err)
	}
	if len(seen) < 2 {
		t.Fatalf("saw child pids %v before the interrupt, want the recovery and tool workers", seen)
	}
	for _, pid := range seen {
		if alive(pid, bin) {
			t.Errorf("child process %d is still running after the interrupted demo", pid)
		}
	}
}

// alive reports whether pid is a running process of bin (a recycled pid of
// another program does not count).
func alive(pid int, bin string) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return true // cannot tell: count it
	}
	return strings.TrimSuffix(exe, " (deleted)") == bin
}
