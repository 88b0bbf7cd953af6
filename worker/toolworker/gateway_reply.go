package toolworker

import (
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// HeaderGatewayReply is the header of a tool request the gateway
// (jw.api.call) publishes: the subject (<prefix>.gateway.<gateway id>) on
// which the tool worker that runs the request tells the gateway where its
// tool.call is on the session log. The word is only a hint: the gateway
// answers from the log alone (see Gateway.Call), so a lost, late or
// forged word costs time, never a wrong answer.
const HeaderGatewayReply = "Jw-Gateway-Reply"

// gatewayWord is what a tool worker tells the gateway about one request:
// the stream sequence of the request's tool.call (0 when the request was
// answered without a call of this delivery: refused with an answer on
// jw.answers.<session>, or found already in the log).
type gatewayWord struct {
	Session   string `json:"session"`
	RequestID string `json:"request_id"`
	CallSeq   uint64 `json:"call_seq,omitempty"`
}

// gatewaySubjectOK reports whether subj is a gateway's reply subject under
// prefix: one token after "<prefix>.gateway.", without wildcards, so that
// a request's header cannot make a tool worker publish anywhere else.
func gatewaySubjectOK(prefix, subj string) bool {
	id, ok := strings.CutPrefix(subj, prefix+".gateway.")
	return ok && id != "" && len(id) <= 64 && !strings.ContainsAny(id, ".*> \t\r\n")
}

// tellGateway tells the gateway that forwarded request m (its
// HeaderGatewayReply; nothing for a request published another way) where
// the request's tool.call is (callSeq, 0 when it has none from this
// delivery). A core publish: nothing is stored, nothing waited for.
func (s *session) tellGateway(m jetstream.Msg, r schema.Request, callSeq uint64) {
	if m == nil || r.RequestID == "" {
		return
	}
	h := m.Headers()
	if h == nil {
		return
	}
	subj := h.Get(HeaderGatewayReply)
	if subj == "" || !gatewaySubjectOK(s.w.topo.Prefix, subj) {
		return
	}
	b, err := json.Marshal(gatewayWord{Session: s.id, RequestID: r.RequestID, CallSeq: callSeq})
	if err != nil {
		return
	}
	if err := s.w.topo.JS.Conn().Publish(subj, b); err != nil {
		s.p.log.Debug().Err(err).Str("session", s.id).Str("request_id", r.RequestID).Msg("could not tell the gateway")
	}
}

// tellGatewayCall tells the gateway where the request's tool.call is, if
// it was recorded (callSeq > 0); a call not recorded is tried again.
func (s *session) tellGatewayCall(m jetstream.Msg, r schema.Request, callSeq uint64) {
	if callSeq > 0 {
		s.tellGateway(m, r, callSeq)
	}
}
