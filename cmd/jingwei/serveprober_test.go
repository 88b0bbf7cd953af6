package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker/service"
)

// TestServeProbesCallsAwaitingAtStart: a payment left needs_review while
// serve ran without a prober is probed when serve starts again with one
// (the default): the recovery worker rebuilt it from the streams, no
// assessment of it comes again, and the prober takes it from the calls
// awaiting review. Nothing was charged: the probe raises the ledger's
// fence, finds no charge and signs not_executed.
func TestServeProbesCallsAwaitingAtStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	url, _, stop := startServe(t, dir, "--no-prober")
	openPayment(t, url, dir, "pay-restart", "c-pay-restart", `{"account":"acct-1","amount_cents":300}`)
	status := func(url string) service.Status {
		nc := connectRole(t, url, dir, access.RoleHost)
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, _ := service.NewClient(nc, service.ClientConfig{Timeout: 5 * time.Second}).Status(ctx, service.StatusRequest{Session: "pay-restart", CallID: "c-pay-restart"})
		return st
	}
	streamtest.Eventually(t, 20*time.Second, "the payment awaits review", func() bool {
		return len(status(url).AwaitingReview) == 1
	})
	if st := status(url); len(st.Reviews) != 0 {
		t.Fatalf("reviews without a prober: %+v", st.Reviews)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}
	url, _, _ = startServe(t, dir)
	var got service.ReviewCheck
	streamtest.Eventually(t, 20*time.Second, "the prober settles the payment after the restart", func() bool {
		for _, c := range status(url).Reviews {
			if c.Accepted && c.Decides && c.Source == "probe" {
				got = c
				return true
			}
		}
		return false
	})
	if got.Review.Verdict != schema.VerdictNotExecuted || got.Review.Probe != tools.PaymentsLookup {
		t.Fatalf("review %+v: want payments.lookup's not_executed", got.Review)
	}
}

// TestRecoverProberNeedsItsRoleKey: recover's prober connects as the
// prober role; an auth directory without that role's key (made before the
// role existed) is a usage error naming the fix, before anything connects.
func TestRecoverProberNeedsItsRoleKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := access.KeyDir(dir).Init(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(access.KeyDir(dir).SeedFile(access.RoleProber)); err != nil {
		t.Fatal(err)
	}
	// Any user seed serves as the prober's signing key.
	seed := access.KeyDir(dir).SeedFile(access.RoleReviewer)
	code, _, stderr := runCLI("recover", "--server", "nats://127.0.0.1:1", "--auth", dir, "--probe-key", seed)
	if code != exitUsage || !strings.Contains(stderr, "role prober") || !strings.Contains(stderr, "jingwei auth init --dir "+dir) {
		t.Fatalf("recover --probe-key without prober.nk: exit %d\n%s", code, stderr)
	}
}
