package stream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestParsePlainAck: only the exact form the server writes for a stored
// message is read by hand; everything else goes to the decoder.
func TestParsePlainAck(t *testing.T) {
	for in, want := range map[string]uint64{
		`{"stream":"JW_EVENTS","seq":1}`:                   1,
		`{"stream":"JW_EVENTS","seq":18446744073709551}`:   18446744073709551,
		`{"stream":"JW_EVENTS","seq":1234567890123456789}`: 1234567890123456789,
	} {
		name, seq, ok := parsePlainAck([]byte(in))
		if !ok || seq != want || string(name) != "JW_EVENTS" {
			t.Errorf("parsePlainAck(%s) = %q, %d, %v", in, name, seq, ok)
		}
	}
	ack := []byte(`{"stream":"JW_EVENTS","seq":123456}`)
	if n := testing.AllocsPerRun(100, func() { _, _, _ = parsePlainAck(ack) }); n != 0 {
		t.Errorf("parsePlainAck: %.0f allocations, want 0", n)
	}
	for _, in := range []string{
		``, `{`, `}`, `{"stream":"JW_EVENTS","seq":}`, `{"stream":"","seq":1}`, `{"stream":"JW_EVENTS","seq":01}`,
		`{"stream":"JW_EVENTS","seq":-1}`, `{"stream":"JW_EVENTS","seq":1.0}`, `{"stream":"JW_EVENTS","seq":12345678901234567890}`,
		`{"stream":"JW_EVENTS","seq":1,"duplicate": true}`, `{"stream":"JW_EVENTS","domain":"hub","seq":1}`,
		`{"stream":"JW\"EVENTS","seq":1}`, `{"stream":"JW_EVENTS","seq":1} `, `{"stream":"JW_EVENTS" ,"seq":1}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"JW_EVENTS","seq":0}`,
		`{"stream":"JW_EVENTS","seq":1,"error":{"code":503}}`,
	} {
		if _, _, ok := parsePlainAck([]byte(in)); ok {
			t.Errorf("parsePlainAck(%s) accepted", in)
		}
	}
}

// TestPublishAckAsJetStream: for every kind of reply a publish can get —
// a plain ack, a duplicate, one with a domain, API errors (wrong last
// sequence, no leader), a reply that is no ack, no responders — publishAck
// returns what jetstream's PublishMsg returns: the same stream and
// sequence, or an error with the same text that the send loop classifies
// the same way (isWrongLastSeq, Transient).
func TestPublishAckAsJetStream(t *testing.T) {
	topo := setup(t, TopologyConfig{})
	nc := topo.JS.Conn()
	replies := []string{
		`{"stream":"JW_EVENTS","seq":7}`,
		`{"stream":"JW_EVENTS","seq":7,"duplicate": true}`,
		`{"stream":"JW_EVENTS","domain":"hub","seq":7}`,
		`{"stream":"OTHER","seq":9}`,
		`{"stream":"J\u0057_EVENTS","seq":7}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"JW_EVENTS","seq":0}`,
		`{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`,
		`{"error":{"code":500,"description":"boom"}}`,
		`{"stream":"","seq":1}`,
		`{"seq":1}`,
		`not json`,
		`{"type":"io.nats.jetstream.api.v1.pub_ack","stream":"JW_EVENTS","seq":3}`,
	}
	for _, reply := range replies {
		sub, err := nc.Subscribe("fake.publish", func(m *nats.Msg) { _ = m.Respond([]byte(reply)) })
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, jerr := topo.JS.PublishMsg(ctx, &nats.Msg{Subject: "fake.publish", Data: []byte("x"), Header: nats.Header{}})
		stream, seq, err := publishAck(ctx, nc, &nats.Msg{Subject: "fake.publish", Data: []byte("x"), Header: nats.Header{}}, "JW_EVENTS")
		cancel()
		// The timeout form reads every reply the same way.
		wstream, wseq, werr := publishAckWithin(nc, &nats.Msg{Subject: "fake.publish", Data: []byte("x"), Header: nats.Header{}}, "JW_EVENTS", 5*time.Second)
		_ = sub.Unsubscribe()
		if wstream != stream || wseq != seq || (werr == nil) != (err == nil) || werr != nil && werr.Error() != err.Error() {
			t.Fatalf("reply %s: publishAckWithin %s/%d %v, publishAck %s/%d %v", reply, wstream, wseq, werr, stream, seq, err)
		}
		if (err == nil) != (jerr == nil) {
			t.Fatalf("reply %s: publishAck error %v, jetstream %v", reply, err, jerr)
		}
		if err != nil {
			if err.Error() != jerr.Error() || isWrongLastSeq(err) != isWrongLastSeq(jerr) || Transient(err) != Transient(jerr) {
				t.Fatalf("reply %s: publishAck error %q (wrong seq %v, transient %v), jetstream %q (%v, %v)", reply, err, isWrongLastSeq(err), Transient(err), jerr, isWrongLastSeq(jerr), Transient(jerr))
			}
			continue
		}
		if stream != ack.Stream || seq != ack.Sequence {
			t.Fatalf("reply %s: publishAck %s/%d, jetstream %s/%d", reply, stream, seq, ack.Stream, ack.Sequence)
		}
	}

	// No responders: jetstream retries and gives up with
	// ErrNoStreamResponse, publishAck returns at once with
	// nats.ErrNoResponders; both are transient, so send retries either.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, jerr := topo.JS.PublishMsg(ctx, &nats.Msg{Subject: "nobody.here", Header: nats.Header{}})
	_, _, err := publishAck(ctx, nc, &nats.Msg{Subject: "nobody.here", Header: nats.Header{}}, "JW_EVENTS")
	if !errors.Is(jerr, jetstream.ErrNoStreamResponse) || !errors.Is(err, nats.ErrNoResponders) || !Transient(err) || !Transient(jerr) {
		t.Fatalf("no responders: publishAck %v, jetstream %v", err, jerr)
	}
	if _, _, err := publishAckWithin(nc, &nats.Msg{Subject: "nobody.here", Header: nats.Header{}}, "JW_EVENTS", 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no responders: publishAckWithin %v", err)
	}

	// Nobody answers: the timeout form gives up after its bound with the
	// context form's error, DeadlineExceeded (transient).
	silent, err := nc.Subscribe("fake.silent", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = silent.Unsubscribe() }()
	start := time.Now()
	_, _, err = publishAckWithin(nc, &nats.Msg{Subject: "fake.silent", Header: nats.Header{}}, "JW_EVENTS", 200*time.Millisecond)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || !Transient(err) || took < 200*time.Millisecond || took > 2*time.Second {
		t.Fatalf("no answer: publishAckWithin %v after %v, want context.DeadlineExceeded after 200ms", err, took)
	}
	actx, acancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer acancel()
	if _, _, cerr := publishAck(actx, nc, &nats.Msg{Subject: "fake.silent", Header: nats.Header{}}, "JW_EVENTS"); cerr == nil || cerr.Error() != err.Error() {
		t.Fatalf("no answer: publishAck %v, publishAckWithin %v: want the same error", cerr, err)
	}
}
