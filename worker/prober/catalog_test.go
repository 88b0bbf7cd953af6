package prober_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/catalog"
	"github.com/jingwei/jingwei/worker/prober"
	"github.com/jingwei/jingwei/worker/service"
)

// TestCatalogHTTPProbe: a catalog's HTTP tool names an HTTP probe declared
// read_only and authoritative; the prober calls the probe endpoint with the
// call's fencing token (the session's fence epoch) and its not_found
// becomes a signed not_executed.
func TestCatalogHTTPProbe(t *testing.T) {
	e := setup(t)
	release := make(chan struct{})
	var probeEpoch atomic.Value
	mux := http.NewServeMux()
	mux.HandleFunc("/pay", func(w http.ResponseWriter, r *http.Request) {
		<-release // the writer freezes before its effect
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/find", func(w http.ResponseWriter, r *http.Request) {
		probeEpoch.Store(r.Header.Get("Jw-Fence-Epoch"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"answer":"not_found","evidence":"no payment for this call after raising the fence"}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)
	cat, err := catalog.Parse([]byte(`version: 1
tools:
  - name: pay
    http: {url: "` + srv.URL + `/pay"}
    contract: {effect: non_idempotent, revision: pay-v1}
    probe: pay.find
  - name: pay.find
    http: {url: "` + srv.URL + `/find"}
    contract: {effect: read_only, revision: find-v1}
    authoritative_not_found: true
`))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := catalog.Open(cat, zerolog.Nop()).Tools(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := worker.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	e.startProber(func(c *prober.Config) { c.Tools = reg })

	a, err := e.topo.Leases().TakeOver(e.ctx, session, "w-a", e.topo.Leases().SessionLeases())
	if err != nil {
		t.Fatal(err)
	}
	pay, _ := reg.Lookup("pay")
	rt := e.runtime(a, pay)
	go func() { _, _ = rt.Call(e.ctx, "pay", []byte(`{"amount":5}`)) }()
	var callID string
	waitStarted(t, e, &callID)
	a.Hold.Lose(errors.New("test: frozen"))
	c := e.deciding(callID, "the HTTP probe's not_executed is accepted", func(c service.ReviewCheck) bool {
		return c.Decides && c.Review.Verdict == schema.VerdictNotExecuted
	})
	if c.Review.Probe != "pay.find" || probeEpoch.Load() == nil || probeEpoch.Load() == "" || probeEpoch.Load() == "0" {
		t.Fatalf("review %+v, probe saw epoch %v", c.Review, probeEpoch.Load())
	}
}

// waitStarted waits for the call's tool.started in the session's log.
func waitStarted(t *testing.T, e *env, callID *string) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	for *callID == "" {
		h, err := e.topo.Logs().Load(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range h {
			if ev.Type == schema.TypeStarted {
				*callID = ev.Started.CallID
			}
		}
	}
}
