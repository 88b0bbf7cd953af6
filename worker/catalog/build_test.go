package catalog_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/catalog"
)

func TestToolsFromACatalog(t *testing.T) {
	var gotKey string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey = r.Header.Get("Idempotency-Key")
		_, _ = io.WriteString(w, `{"city":"`+r.URL.Path[len("/weather/"):]+`"}`)
	}))
	defer hs.Close()
	cat, err := catalog.Parse([]byte(`version: 1
tools:
  - name: weather.get
    http: {method: GET, url: "` + hs.URL + `/weather/{city}", body: none}
    contract: {effect: read_only, revision: weather-v1}
    timeout: 2s
    input_schema: {type: object, required: [city], properties: {city: {type: string}}}
  - name: orders.create
    builtin: orders.create
  - name: big.charge
    builtin: payments.charge
    contract: {effect: non_idempotent, revision: big-v1}
    approval: {when: amount_cents>100, timeout: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	set := catalog.Open(cat, zerolog.Nop())
	defer set.Close()
	list, err := set.Tools(t.Context(), (&tools.Tools{}).List())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := worker.NewRegistry(list...)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := reg.Lookup("weather.get")
	if w.Metadata.Contract != (effect.Contract{Effect: effect.ReadOnly, Revision: "weather-v1"}) || w.Timeout.String() != "2s" || len(w.InputSchema) == 0 {
		t.Fatalf("weather.get: %+v", w.Metadata)
	}
	out, err := w.Body(t.Context(), worker.BodyRequest{Arguments: json.RawMessage(`{"city":"Oslo"}`), Operation: worker.Operation{Task: "t", Key: "k"}})
	if err != nil || string(out) != `{"city":"Oslo"}` || gotKey != "t/k" {
		t.Fatalf("weather.get body: %s %v key %q", out, err, gotKey)
	}
	o, _ := reg.Lookup("orders.create")
	if o.Metadata.Contract != (effect.Contract{Effect: effect.Idempotent, Revision: tools.OrdersRevision}) || o.Approval != nil {
		t.Fatalf("orders.create keeps its own contract: %+v", o.Metadata)
	}
	c, _ := reg.Lookup("big.charge")
	if c.Metadata.Contract.Revision != "big-v1" || c.Approval == nil || c.Approval.Timeout.String() != "1m0s" {
		t.Fatalf("big.charge: %+v %+v", c.Metadata, c.Approval)
	}
	for args, want := range map[string]bool{`{"amount_cents":100}`: false, `{"amount_cents":101}`: true, `{}`: true} {
		if got := c.Approval.When(json.RawMessage(args)); got != want {
			t.Errorf("approval when %s: %v, want %v", args, got, want)
		}
	}

	bad, _ := catalog.Parse([]byte("version: 1\ntools:\n  - name: x\n    builtin: nope.tool\n"))
	if bad != nil {
		if _, err := catalog.Open(bad, zerolog.Nop()).Tools(t.Context(), nil); !errors.Is(err, catalog.ErrInvalid) {
			t.Fatalf("unknown builtin: %v", err)
		}
	}
}
