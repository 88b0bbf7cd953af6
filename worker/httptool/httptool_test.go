package httptool_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/httptool"
)

// api is an HTTP API that honours Idempotency-Key: a key seen before gets
// the stored answer, and the charge is made once.
type api struct {
	mu      sync.Mutex
	byKey   map[string]string
	charges int
	headers []http.Header
	paths   []string
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.headers = append(a.headers, r.Header.Clone())
	a.paths = append(a.paths, r.URL.Path)
	switch {
	case strings.HasPrefix(r.URL.Path, "/boom"):
		a.charges++ // charged, then the API answers 500
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	case strings.HasPrefix(r.URL.Path, "/slow"):
		a.mu.Unlock()
		<-r.Context().Done()
		a.mu.Lock()
		return
	case strings.HasPrefix(r.URL.Path, "/text"):
		_, _ = io.WriteString(w, "plain words")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	if ans, ok := a.byKey[key]; ok {
		_, _ = io.WriteString(w, ans)
		return
	}
	a.charges++
	ans := `{"charge":` + itoa(a.charges) + `,"body":` + string(body) + `}`
	a.byKey[key] = ans
	_, _ = io.WriteString(w, ans)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func req(callID, key, args string) worker.BodyRequest {
	return worker.BodyRequest{
		Session: "s1", CallID: callID, Arguments: json.RawMessage(args),
		Operation: worker.Operation{Task: "t1", Key: key},
		Fence:     worker.Fence{Session: "s1", Epoch: 3, CallID: callID, Task: "t1", Key: key},
	}
}

func TestIdempotencyKeyMakesARetryOneCharge(t *testing.T) {
	a := &api{byKey: map[string]string{}}
	hs := httptest.NewServer(a)
	defer hs.Close()
	body := httptool.Endpoint{URL: hs.URL + "/charges/{customer}", Headers: map[string]string{"Authorization": "Bearer x"}}.Body()
	out1, err := body(t.Context(), req("c1", "k1", `{"customer":"a b","amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	out2, err := body(t.Context(), req("c2", "k1", `{"customer":"a b","amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(out1) != string(out2) || a.charges != 1 {
		t.Fatalf("first %s, retry %s, %d charges: want the stored answer and one charge", out1, out2, a.charges)
	}
	h := a.headers[1]
	if h.Get("Idempotency-Key") != "t1/k1" || h.Get(httptool.HeaderFenceSession) != "s1" || h.Get(httptool.HeaderFenceEpoch) != "3" ||
		h.Get(httptool.HeaderFenceCall) != "c2" || h.Get("Authorization") != "Bearer x" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", h)
	}
	if a.paths[0] != "/charges/a b" {
		t.Fatalf("path %q", a.paths[0])
	}
	if _, err := body(t.Context(), req("c3", "k2", `{"amount":5}`)); err == nil || !strings.Contains(err.Error(), `no argument "customer"`) {
		t.Fatalf("missing placeholder: %v", err)
	}
}

// A 500 is failed and not retryable: it does not prove no charge was made
// (this API charged).
func TestNon2xxIsFailedNotRetryable(t *testing.T) {
	a := &api{byKey: map[string]string{}}
	hs := httptest.NewServer(a)
	defer hs.Close()
	out, err := httptool.Endpoint{URL: hs.URL + "/boom"}.Body()(t.Context(), req("c1", "k1", `{}`))
	if err == nil || out != nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("500: %s, %v", out, err)
	}
	if a.charges != 1 {
		t.Fatal("the API did not charge")
	}
}

func TestTimeoutIsTheContextsError(t *testing.T) {
	a := &api{byKey: map[string]string{}}
	hs := httptest.NewServer(a)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := httptool.Endpoint{Method: "GET", NoBody: true, URL: hs.URL + "/slow"}.Body()(ctx, req("c1", "k1", `{}`))
	if err != context.DeadlineExceeded {
		t.Fatalf("slow: %v, want the deadline", err)
	}
}

func TestTransportErrorIsFailed(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	u := hs.URL
	hs.Close()
	if _, err := (httptool.Endpoint{URL: u}).Body()(t.Context(), req("c1", "k1", `{}`)); err == nil || !strings.Contains(err.Error(), "no response") {
		t.Fatalf("closed server: %v", err)
	}
}

func TestTextAnswerIsAJSONString(t *testing.T) {
	hs := httptest.NewServer(&api{byKey: map[string]string{}})
	defer hs.Close()
	out, err := httptool.Endpoint{URL: hs.URL + "/text"}.Body()(t.Context(), req("c1", "k1", `{}`))
	if err != nil || string(out) != `"plain words"` {
		t.Fatalf("%s, %v", out, err)
	}
}
