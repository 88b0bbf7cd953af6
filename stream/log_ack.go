package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishAck sends msg as jetstream's PublishMsg does (a request on the
// connection, the reply its acknowledgement) and returns the stream and
// sequence the acknowledgement names. The common reply,
// {"stream":"<name>","seq":<n>}, which the server writes by hand, is read
// without a JSON decoder (a fifth of what an append costs the client
// besides the round trip, and most of its allocations); any other reply
// (an error, a duplicate, a domain) is decoded as jetstream decodes it and
// gives the same errors: the API error wrapped as "nats: %w" (isWrongLastSeq
// and Transient see it), jetstream.ErrInvalidJSAck for a reply that is not
// an acknowledgement. No responders is nats.ErrNoResponders, which send
// retries (jetstream retries it itself, twice, 250 ms apart).
//
// want is the stream the caller expects the acknowledgement from: the
// returned stream is want itself when the reply names it (no copy).
func publishAck(ctx context.Context, nc *nats.Conn, msg *nats.Msg, want string) (stream string, seq uint64, err error) {
	resp, err := nc.RequestMsgWithContext(ctx, msg)
	return readAck(resp, err, want)
}

// publishAckWithin is publishAck bounded by d instead of a context (d > 0):
// nats.go's request with a timeout takes its timer from a pool, where a
// context made per publish costs a timer and a context of its own. For a
// caller whose context never ends (Log.AppendFor). It gives up with
// context.DeadlineExceeded, as publishAck under a context with a timeout
// of d does (nats.go says nats.ErrTimeout).
func publishAckWithin(nc *nats.Conn, msg *nats.Msg, want string, d time.Duration) (stream string, seq uint64, err error) {
	resp, err := nc.RequestMsg(msg, d)
	if errors.Is(err, nats.ErrTimeout) {
		err = context.DeadlineExceeded
	}
	return readAck(resp, err, want)
}

// readAck is what publishAck returns for the request's reply resp (or its
// error err).
func readAck(resp *nats.Msg, err error, want string) (stream string, seq uint64, _ error) {
	if err != nil {
		return "", 0, err
	}
	if name, seq, ok := parsePlainAck(resp.Data); ok {
		if string(name) == want {
			return want, seq, nil
		}
		return string(name), seq, nil
	}
	var ack struct {
		Error    *jetstream.APIError `json:"error,omitempty"`
		Stream   string              `json:"stream"`
		Sequence uint64              `json:"seq"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return "", 0, jetstream.ErrInvalidJSAck
	}
	if ack.Error != nil {
		return "", 0, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.Stream == "" {
		return "", 0, jetstream.ErrInvalidJSAck
	}
	return ack.Stream, ack.Sequence, nil
}

// parsePlainAck reads an acknowledgement of exactly the form
// {"stream":"<name>","seq":<n>} (a name without escapes, n a decimal of at
// most 19 digits without sign or leading zeros); ok is false for anything
// else. name aliases b.
func parsePlainAck(b []byte) (name []byte, seq uint64, ok bool) {
	const pre, mid = `{"stream":"`, `","seq":`
	if !bytes.HasPrefix(b, []byte(pre)) || b[len(b)-1] != '}' {
		return nil, 0, false
	}
	rest := b[len(pre) : len(b)-1]
	i := bytes.IndexByte(rest, '"')
	if i <= 0 || bytes.IndexByte(rest[:i], '\\') >= 0 || !bytes.HasPrefix(rest[i:], []byte(mid)) {
		return nil, 0, false
	}
	name, num := rest[:i], rest[i+len(mid):]
	if len(num) == 0 || len(num) > 19 || len(num) > 1 && num[0] == '0' {
		return nil, 0, false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return nil, 0, false
		}
		seq = seq*10 + uint64(c-'0')
	}
	return name, seq, true
}
