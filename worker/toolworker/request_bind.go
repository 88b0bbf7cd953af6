package toolworker

import (
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// requestDigest is what a request id is bound to: stream.RequestDigest of
// the request (tool, task, arguments). The zero value binds to nothing
// (a call whose content could not be digested: no request matches it).
type requestDigest [16]byte

// seenRequest is a request id recorded on the log with the digest of its
// call's request.
type seenRequest struct {
	id     string
	digest requestDigest
}

// digestOf returns the digest of r; ok false if its arguments do not
// canonicalize.
func digestOf(tool, task string, args []byte) (requestDigest, bool) {
	full, err := stream.RequestDigest(tool, task, args)
	if err != nil {
		return requestDigest{}, false
	}
	var d requestDigest
	copy(d[:], full[:])
	return d, true
}

// digestOfCall returns the digest of the request a recorded tool.call
// carries (stream.CallDigest); zero if it has none.
func digestOfCall(c *schema.Call) requestDigest {
	var d requestDigest
	if full, ok := stream.CallDigest(c); ok {
		copy(d[:], full[:])
	}
	return d
}

// alreadyBound handles a request whose id a call of the log already
// carries (bound is that call's request digest): the same request again
// (a redelivery, a publish after the dedup window) is acknowledged and
// not run again; another request under the same id is refused with
// request_conflict on jw.answers — never taken as answered by the other
// request's call, whose result its sender would otherwise read as its own.
func (s *session) alreadyBound(lg zerolog.Logger, m jetstream.Msg, r schema.Request, bound requestDigest) bool {
	d, ok := digestOf(r.Tool, r.Task, r.Arguments)
	if ok && d == bound && bound != (requestDigest{}) {
		lg.Info().Msg("request already in the log; acknowledged, not run again")
		_ = m.Ack()
		s.tellGateway(m, r, 0) // the gateway finds the call in the log
		return true
	}
	return s.refuse(m, r, schema.CodeRequestConflict, fmt.Errorf("request_id %q is bound to another request of session %s (another tool, task or arguments): this one is not run, and the other's result is not its answer", r.RequestID, s.id))
}
