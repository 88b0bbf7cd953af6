package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestServeCallsAnswersEachTurn: the child of the tracing-off row says
// first that this build has the hooks and that tracing is off (no
// OTEL_*), then makes as many calls as each line asks — all of them on
// the session log — and answers each line with the nanoseconds taken.
func TestServeCallsAnswersEachTurn(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	srv, _, topo := streamtest.Start(t)
	ctx := context.Background()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeCalls(ctx, CallsConfig{Server: srv.ClientURL(), Prefix: topo.Prefix, Session: "sc"}, inR, outW)
		outW.Close()
	}()
	out := bufio.NewScanner(outR)
	var r CallsReport
	if !out.Scan() || json.Unmarshal(out.Bytes(), &r) != nil || !r.Hooks || r.Tracing {
		t.Fatalf("first line %q, want hooks compiled and tracing off", out.Text())
	}
	for _, n := range []int{3, 2} {
		if _, err := io.WriteString(inW, strconv.Itoa(n)+"\n"); err != nil {
			t.Fatal(err)
		}
		if !out.Scan() {
			t.Fatalf("no answer to %d: %v", n, <-done)
		}
		if ns, err := strconv.ParseInt(out.Text(), 10, 64); err != nil || ns <= 0 {
			t.Fatalf("answer %q", out.Text())
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	info, err := topo.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The log's opening fence, then a tool.call and a tool.result a call.
	if info.State.Msgs != 1+2*5 {
		t.Fatalf("%d messages on the session log, want 11", info.State.Msgs)
	}

	bad := ServeCalls(ctx, CallsConfig{Server: srv.ClientURL(), Prefix: topo.Prefix, Session: "sc2"}, strings.NewReader("many\n"), io.Discard)
	if bad == nil {
		t.Fatal("a line that is not a count was taken")
	}
}

// TestTracingPairBuilds: the row's two binaries, built from this module,
// say what they are from outside — the ordinary build has the hooks, the
// jw_notracing build has none, tracing off in both (no OTEL_* in their
// environment even when the bench has one) — and take turns of calls.
func TestTracingPairBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds jingwei twice")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	withHooks, without, err := buildTracingPair(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, _, topo := streamtest.Start(t)
	for _, exe := range []string{withHooks, without} {
		c, err := startCallsChild(ctx, exe, srv.ClientURL(), topo.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := c.turn(2); err != nil || d <= 0 {
			t.Fatalf("%s: %v %v", exe, d, err)
		}
		c.stop()
	}
}
