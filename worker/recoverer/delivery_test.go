package recoverer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestParseAckReply: the classifier's reading of a delivery agrees with
// jetstream's Metadata on both ack subject forms, and refuses what that
// refuses (so the fallback decides).
func TestParseAckReply(t *testing.T) {
	for _, c := range []struct {
		reply string
		want  delivery
		ok    bool
	}{
		{"$JS.ACK.JW_EVENTS.rec.1.42.7.1700000000000000000.99", delivery{42, 7, 99, "JW_EVENTS", "rec"}, true},
		{"$JS.ACK._.ACCHASH.JW_EVENTS.rec.2.42.7.1700000000000000000.0.RANDOM", delivery{42, 7, 0, "JW_EVENTS", "rec"}, true},
		{"$JS.ACK.hub.ACCHASH.JW_EVENTS.rec.2.42.7.1700000000000000000.5", delivery{42, 7, 5, "JW_EVENTS", "rec"}, true},
		{"$JS.ACK.hub.ACCHASH.JW_EVENTS.rec.2.42.7.1700000000000000000.5.tok.more", delivery{42, 7, 5, "JW_EVENTS", "rec"}, true},
		{"$JS.ACK.JW_EVENTS.rec.1.42.7.1700000000000000000", delivery{}, false},       // 8 tokens
		{"$JS.ACK.JW_EVENTS.rec.1.42.7.17.99.x", delivery{}, false},                   // 10 tokens
		{"$JS.ACK.JW_EVENTS.rec.1.4x.7.1700000000000000000.99", delivery{}, false},    // not a number
		{"$JS.ACK.JW_EVENTS.rec.1..7.1700000000000000000.99", delivery{}, false},      // empty
		{"_INBOX.abc.JW_EVENTS.rec.1.42.7.1700000000000000000.99", delivery{}, false}, // not an ack
		{"", delivery{}, false},
	} {
		got, ok := parseAckReply(c.reply)
		if ok != c.ok || ok && got != c.want {
			t.Errorf("parseAckReply(%q) = %+v, %v; want %+v, %v", c.reply, got, ok, c.want, c.ok)
		}
	}
}

// TestDeliveryOfMatchesMetadata: on real deliveries of a consumer the
// classifier reads the same stream and consumer sequences and pending
// count as jetstream's Metadata.
func TestDeliveryOfMatchesMetadata(t *testing.T) {
	e := setup(t, 0)
	ctx := context.Background()
	for i := range 20 {
		if _, err := e.topo.JS.Publish(ctx, e.topo.Names().EventsSubject(fmt.Sprintf("s-%d", i%3)), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := e.topo.JS.CreateOrUpdateConsumer(ctx, e.topo.Names().StreamName("EVENTS"), eventsConsumerConfig("deliveries"))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(20, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		d, ok := parseAckReply(m.Reply())
		if !ok {
			t.Fatalf("reply %q not read", m.Reply())
		}
		if want := (delivery{md.Sequence.Stream, md.Sequence.Consumer, md.NumPending, md.Stream, md.Consumer}); d != want {
			t.Fatalf("reply %q read as %+v, Metadata says %+v", m.Reply(), d, want)
		}
	}
	if n != 20 {
		t.Fatalf("%d deliveries, want 20", n)
	}
	// Not a JetStream message: the fallback's error.
	if _, err := deliveryOf(plainMsg{&nats.Msg{Subject: "x", Reply: "_INBOX.1"}}); err == nil {
		t.Fatal("deliveryOf of a plain message: no error")
	}
}

// plainMsg is a jetstream.Msg over a core message, for the fallback.
type plainMsg struct{ m *nats.Msg }

func (p plainMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return nil, jetstream.ErrNotJSMessage
}
func (p plainMsg) Data() []byte                     { return p.m.Data }
func (p plainMsg) Headers() nats.Header             { return p.m.Header }
func (p plainMsg) Subject() string                  { return p.m.Subject }
func (p plainMsg) Reply() string                    { return p.m.Reply }
func (p plainMsg) Ack() error                       { return nil }
func (p plainMsg) DoubleAck(context.Context) error  { return nil }
func (p plainMsg) Nak() error                       { return nil }
func (p plainMsg) NakWithDelay(time.Duration) error { return nil }
func (p plainMsg) InProgress() error                { return nil }
func (p plainMsg) Term() error                      { return nil }
func (p plainMsg) TermWithReason(string) error      { return nil }
