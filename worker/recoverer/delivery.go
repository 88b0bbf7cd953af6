package recoverer

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// delivery is what the classifier reads of a message's metadata: its
// stream sequence, its consumer sequence (the delivery's number) and how
// many messages the consumer still has pending.
type delivery struct {
	stream, consumer, pending uint64
	// streamName and consumerName are the consumer's, from the ack
	// subject: a message on the consumer's inbox that another consumer
	// delivered (a push consumer's deliver subject is anyone's choice)
	// names another.
	streamName, consumerName string
}

// deliveryOf reads the delivery of m from its reply subject without
// allocating (jetstream's Metadata builds a struct and a time for every
// message); a reply it does not know falls back to m.Metadata.
func deliveryOf(m jetstream.Msg) (delivery, error) {
	if d, ok := parseAckReply(m.Reply()); ok {
		return d, nil
	}
	md, err := m.Metadata()
	if err != nil {
		return delivery{}, err
	}
	return delivery{stream: md.Sequence.Stream, consumer: md.Sequence.Consumer, pending: md.NumPending, streamName: md.Stream, consumerName: md.Consumer}, nil
}

// parseAckReply reads a JetStream ack subject, either form:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>…]
//
// (9 tokens, or at least 11; the same rule as nats.go's parser).
func parseAckReply(reply string) (delivery, bool) {
	if !strings.HasPrefix(reply, "$JS.ACK.") {
		return delivery{}, false
	}
	var at int // token index of the stream sequence
	switch n := strings.Count(reply, ".") + 1; {
	case n == 9:
		at = 5
	case n >= 11:
		at = 7
	default:
		return delivery{}, false
	}
	rest := reply
	var streamName, consumerName string
	for i := range at {
		var tok string
		tok, rest, _ = strings.Cut(rest, ".")
		switch i {
		case at - 3:
			streamName = tok
		case at - 2:
			consumerName = tok
		}
	}
	// <sseq>.<cseq>.<tm>.<pending>
	sseq, rest, _ := strings.Cut(rest, ".")
	cseq, rest, _ := strings.Cut(rest, ".")
	_, rest, _ = strings.Cut(rest, ".")
	pend, _, _ := strings.Cut(rest, ".")
	d := delivery{streamName: streamName, consumerName: consumerName}
	var ok1, ok2, ok3 bool
	d.stream, ok1 = parseUint(sseq)
	d.consumer, ok2 = parseUint(cseq)
	d.pending, ok3 = parseUint(pend)
	return d, ok1 && ok2 && ok3
}

func parseUint(s string) (uint64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}
