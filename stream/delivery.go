package stream

import "github.com/nats-io/nats.go/jetstream"

// DeliveredBy returns m's metadata if m is a delivery of the consumer info
// describes — the stream and consumer its ack subject names — and ok false
// otherwise. A push consumer's deliver subject is checked against no
// permission, and a pull's inbox is learnt from the heartbeats every
// _INBOX.> subscriber of the account receives, so another consumer can
// deliver anything on a pull consumer's inbox (docs/protocol.md §4): a
// consumer of jingwei's drops such a message unacknowledged.
func DeliveredBy(m jetstream.Msg, info *jetstream.ConsumerInfo) (*jetstream.MsgMetadata, bool) {
	md, err := m.Metadata()
	if err != nil || info == nil || md.Stream != info.Stream || md.Consumer != info.Name {
		return nil, false
	}
	return md, true
}
