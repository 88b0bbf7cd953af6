package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// TestQuickRequestsNotQueuedBehindSlowOnes: the server hands a request to
// one of an endpoint's workers at random, busy or not. With every worker
// holding a slow request (8 of them, 2 workers), 50 quick requests are
// still answered at once: a worker leaves a request to a goroutine after
// AnswerWait and takes the next. The slow requests get their answers (one
// of them an error, in micro's format) when they are ready, and `nats
// micro stats` counts every request and both errors (the detached one in
// the endpoint's data, service.Errors). Before, each worker answered its
// requests one after another: a quick request behind a slow one waited
// for it (the gateway's calls wait up to the call timeout).
func TestQuickRequestsNotQueuedBehindSlowOnes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, nc, topo := streamtest.Start(t)
	const slowFor = 3 * time.Second
	release := make(chan struct{})
	svc, err := service.Start(ctx, service.Config{Conn: nc, Name: service.Name, Prefix: topo.Prefix, Workers: 2},
		service.Endpoint{Name: service.EndpointStatus, Handler: func(ctx context.Context, body []byte) (any, error) {
			var q struct{ Kind string }
			if err := json.Unmarshal(body, &q); err != nil {
				return nil, schema.Errorf(schema.CodeBadRequest, "%v", err)
			}
			switch q.Kind {
			case "slow":
				<-release
				return map[string]string{"kind": "slow"}, nil
			case "slow-error":
				<-release
				return nil, schema.Errorf(schema.CodeUnknownCall, "nothing here")
			}
			return map[string]string{"kind": "quick"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	subj := topo.Names().APISubject(service.EndpointStatus)

	type got struct {
		code, kind string
		err        error
	}
	ask := func(kind string) got {
		m, err := nc.Request(subj, []byte(`{"Kind":"`+kind+`"}`), 30*time.Second)
		if err != nil {
			return got{err: err}
		}
		var a struct{ Kind string }
		_ = json.Unmarshal(m.Data, &a)
		return got{code: service.AnswerCode(m), kind: a.Kind}
	}
	var slow sync.WaitGroup
	slowGot := make(chan got, 8)
	for i := range 8 {
		slow.Add(1)
		go func() {
			defer slow.Done()
			kind := "slow"
			if i == 0 {
				kind = "slow-error"
			}
			slowGot <- ask(kind)
		}()
	}
	time.AfterFunc(slowFor, func() { close(release) })
	// Every worker has had a slow request by now, most of them several.
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	var quick sync.WaitGroup
	var mu sync.Mutex
	var late, wrong int
	for range 50 {
		quick.Add(1)
		go func() {
			defer quick.Done()
			t0 := time.Now()
			g := ask("quick")
			mu.Lock()
			defer mu.Unlock()
			if g.err != nil || g.code != "" || g.kind != "quick" {
				wrong++
			}
			if time.Since(t0) > slowFor/2 {
				late++
			}
		}()
	}
	quick.Wait()
	if wrong > 0 || late > 0 {
		t.Fatalf("of 50 quick requests sent while every worker held a slow one: %d answered wrongly, %d only after %s (took %s)", wrong, late, slowFor/2, time.Since(start))
	}
	slow.Wait()
	close(slowGot)
	var errs int
	for g := range slowGot {
		switch {
		case g.err != nil:
			t.Errorf("slow request: %v", g.err)
		case g.code == string(schema.CodeUnknownCall):
			errs++
		case g.code != "" || g.kind != "slow":
			t.Errorf("slow request answered %q %q", g.code, g.kind)
		}
	}
	if errs != 1 {
		t.Errorf("%d slow error answers, want 1", errs)
	}

	// `nats micro stats`: every request, and the error answered late.
	streamtest.Eventually(t, 5*time.Second, "stats count 58 requests and 1 error", func() bool {
		st := svc.Stats()
		var reqs, nErr int
		for _, ep := range st.Endpoints {
			reqs += ep.NumRequests
			nErr += service.Errors(ep)
		}
		return reqs == 58 && nErr == 1
	})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("test ran out of time")
	}
}
