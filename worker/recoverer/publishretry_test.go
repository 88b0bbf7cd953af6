package recoverer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPublishRetryable: a publish refused because a racing publish of the
// same Msg-Id is still being stored, or because the stream has no leader
// yet, is sent again (and then acknowledged as a duplicate); every other
// refusal by the server is final; failures to reach it are retried.
func TestPublishRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}, true},
		{fmt.Errorf("nats: %w", &jetstream.APIError{Code: 409, ErrorCode: 10158}), true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence"}, false},
		{&jetstream.APIError{Code: 403, ErrorCode: 10000}, false},
		{nats.ErrTimeout, true},
		{errors.New("connection reset"), true},
	} {
		if got := publishRetryable(c.err); got != c.want {
			t.Errorf("publishRetryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
