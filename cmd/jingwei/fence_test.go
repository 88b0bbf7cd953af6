package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
)

// TestFenceAndLedger: against a live serve, with the credentials serve
// made (the reviewer's steps of the README): jingwei ledger lists a
// payment's charge; jingwei fence raises the ledger's fence for the
// session, after which the session's tool worker (a lower epoch) can no
// longer charge; an unknown session is refused.
func TestFenceAndLedger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	url, serveErr, _ := startServe(t, dir)
	base := []string{"--server", url, "--auth", filepath.Join(dir, "auth")}
	charges := func() []tools.Charge {
		t.Helper()
		code, stdout, stderr := runCLI(append([]string{"ledger", "--session", "pf-1", "--json"}, base...)...)
		var out struct{ Charges []tools.Charge }
		if code != exitOK || json.Unmarshal([]byte(stdout), &out) != nil {
			t.Fatalf("ledger: exit %d %q %q", code, stdout, stderr)
		}
		return out.Charges
	}
	pay := func(rid string) {
		t.Helper()
		// The tool worker's service may not answer yet right after serve
		// listens: ask again, with the same request id, until it does.
		streamtest.Eventually(t, 30*time.Second, "jw.api.call answers", func() bool {
			code, stdout, _ := runCLI(append([]string{"call", "--session", "pf-1", "--request-id", rid, "--tool", tools.PaymentsCharge, "--args", `{"account":"acct-1","amount_cents":500}`, "--timeout", "20s"}, base...)...)
			return code == exitOK || !strings.Contains(stdout, "no jingwei service")
		})
	}
	pay("r-1")
	if got := charges(); len(got) != 1 || got[0].AmountCents != 500 {
		t.Fatalf("ledger after one payment: %+v (%s)", got, serveErr)
	}
	code, stdout, stderr := runCLI(append([]string{"fence", "--session", "pf-1", "--epoch", "50", "--json"}, base...)...)
	var f fenceOutput
	if code != exitOK || json.Unmarshal([]byte(stdout), &f) != nil || f.Epoch != 50 {
		t.Fatalf("fence: exit %d %q %q", code, stdout, stderr)
	}
	pay("r-2")
	if got := charges(); len(got) != 1 {
		t.Fatalf("a writer below the raised fence charged: %+v", got)
	}
	// Default epoch: the session's latest on its log.
	if code, stdout, stderr := runCLI(append([]string{"fence", "--session", "pf-1"}, base...)...); code != exitOK {
		t.Errorf("fence at the log's epoch: exit %d %q %q", code, stdout, stderr)
	}
	if code, stdout, _ := runCLI(append([]string{"fence", "--session", "nobody-here"}, base...)...); code != exitRefused || errorCode(stdout) != string(schema.CodeUnknownSession) {
		t.Errorf("fence of an unknown session: exit %d %q, want 3 unknown_session", code, stdout)
	}
}
