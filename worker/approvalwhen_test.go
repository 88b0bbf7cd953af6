package worker_test

import (
	"encoding/json"
	"testing"

	"github.com/jingwei/jingwei/worker"
)

// TestWhenAbove: a call asks when its number is above the limit, or when
// there is no number where the rule looks; a number at or below does not.
func TestWhenAbove(t *testing.T) {
	when := worker.WhenAbove("payment.amount_cents", 1000)
	for _, c := range []struct {
		args string
		asks bool
	}{
		{`{"payment":{"amount_cents":1001}}`, true},
		{`{"payment":{"amount_cents":1000}}`, false},
		{`{"payment":{"amount_cents":5}}`, false},
		{`{"payment":{"amount_cents":1e9}}`, true},
		{`{"payment":{}}`, true},
		{`{"payment":{"amount_cents":"lots"}}`, true},
		{`{"payment":7}`, true},
		{`[]`, true},
	} {
		if got := when(json.RawMessage(c.args)); got != c.asks {
			t.Errorf("%s: asks %v, want %v", c.args, got, c.asks)
		}
	}
}
