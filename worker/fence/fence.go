package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jingwei/jingwei/worker"
)

// Headers a Store puts on every message it writes.
const (
	// HeaderSession is the session of the writer.
	HeaderSession = "Jw-Fence-Session"
	// HeaderEpoch is the writer's epoch (decimal).
	HeaderEpoch = "Jw-Fence-Epoch"
	// HeaderCall is the writer's call id ("" for a Raise).
	HeaderCall = "Jw-Fence-Call"
	// HeaderMarker is set ("raise") on a message Raise appended to a
	// stream that is not a KV bucket: it carries no business record and
	// readers of the stream skip it.
	HeaderMarker = "Jw-Fence-Marker"
)

const kvOperation = "KV-Operation"

// Config configures a Store.
type Config struct {
	// JS is the JetStream context the writes go through. Required.
	JS jetstream.JetStream
	// Stream is the stream the resources live in (for a KV bucket
	// "KV_<bucket>", see ForKV). Required.
	Stream string
	// KV says the stream is a KV bucket: Raise then keeps the key's value
	// (it writes the last value again, or a delete marker for a key without
	// one) instead of appending a marker message. ForKV sets it.
	KV bool
	// MaxAttempts bounds the tries of one write: reads again after the
	// server refused its expected sequence (the resource changed, or the
	// read was served by a lagging replica), and retries after a transient
	// failure (backoff from 5 ms to 500 ms). Defaults to 30.
	MaxAttempts int
	// AttemptTimeout bounds each read and each publish of a write (the
	// write as a whole is bounded by its context and MaxAttempts). A
	// request sent while the stream elects a leader is dropped, not
	// answered: without this bound it would hold the whole write (a tool
	// body's timeout) although the new leader answers a re-send within
	// milliseconds. A re-send after a timed-out publish is safe (the same
	// Nats-Msg-Id, the expected sequence). Defaults to 1 s.
	AttemptTimeout time.Duration
}

// Store makes writes to the subjects of one stream conditional on fencing
// tokens. Safe for concurrent use.
type Store struct {
	cfg    Config
	stream jetstream.Stream
}

// New returns a Store on cfg.Stream, which must exist.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.JS == nil || cfg.Stream == "" {
		return nil, fmt.Errorf("%w: JS and Stream are required", ErrInvalid)
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 30
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = time.Second
	}
	s, err := cfg.JS.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("fence: stream %s: %w", cfg.Stream, err)
	}
	return &Store{cfg: cfg, stream: s}, nil
}

// ForKV returns a Store on the KV bucket's stream; use KeySubject for the
// subject of a key.
func ForKV(ctx context.Context, js jetstream.JetStream, bucket string) (*Store, error) {
	return New(ctx, Config{JS: js, Stream: "KV_" + bucket, KV: true})
}

// KeySubject is the subject of key in bucket ($KV.<bucket>.<key>).
func KeySubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// Record is what a resource's last message says about its writer.
type Record struct {
	// Seq is the message's stream sequence (the KV revision); zero when
	// the subject holds nothing.
	Seq uint64
	// Session and Epoch are the writer's; empty and zero for a message not
	// written through a Store.
	Session string
	Epoch   uint64
	// CallID is the writer's call ("" for a Raise).
	CallID string
	// Value says the last message holds a business value: not a KV delete
	// or purge, not a Raise marker.
	Value bool
	// Data is the last message's payload.
	Data []byte

	msgID string // Nats-Msg-Id: the write that stored it
}

// Last reads the last message of subject. A subject that holds nothing
// returns a zero Record and no error.
func (s *Store) Last(ctx context.Context, subject string) (Record, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Record{}, nil
	}
	if err != nil {
		return Record{}, fmt.Errorf("fence: read %s: %w", subject, err)
	}
	r := Record{Seq: m.Sequence, Data: m.Data, Value: true}
	if m.Header != nil {
		r.msgID = m.Header.Get(jetstream.MsgIDHeader)
		r.Session, r.CallID = m.Header.Get(HeaderSession), m.Header.Get(HeaderCall)
		r.Epoch, _ = strconv.ParseUint(m.Header.Get(HeaderEpoch), 10, 64)
		switch {
		case m.Header.Get(HeaderMarker) != "":
			r.Value = false
		case m.Header.Get(kvOperation) == "DEL" || m.Header.Get(kvOperation) == "PURGE":
			r.Value = false
		}
	}
	return r, nil
}

// fences reports whether r refuses a writer of session at epoch.
func (r Record) fences(session string, epoch uint64) bool {
	return r.Seq > 0 && r.Session == session && r.Epoch > epoch
}

// Write publishes data on subject for the call of tok, unless the
// subject's last message was written by a newer writer of tok.Session
// (ErrStale, nothing written). It returns the stream sequence written.
func (s *Store) Write(ctx context.Context, subject string, tok worker.Fence, data []byte) (uint64, error) {
	return s.write(ctx, subject, tok, data, false)
}

// Create is Write for a resource written once: it refuses with ErrExists
// when the subject already holds a value (a KV key that is set), and with
// ErrStale as Write does. A KV key that was deleted may be created again.
func (s *Store) Create(ctx context.Context, subject string, tok worker.Fence, data []byte) (uint64, error) {
	return s.write(ctx, subject, tok, data, true)
}

func (s *Store) write(ctx context.Context, subject string, tok worker.Fence, data []byte, create bool) (uint64, error) {
	if subject == "" || tok.Session == "" {
		return 0, fmt.Errorf("%w: subject %q, session %q", ErrInvalid, subject, tok.Session)
	}
	return s.cas(ctx, subject, func(last Record) (*nats.Msg, error) {
		if last.fences(tok.Session, tok.Epoch) {
			return nil, fmt.Errorf("%w: %s was written at epoch %d of session %s (call %s); call %s holds epoch %d",
				ErrStale, subject, last.Epoch, last.Session, orDash(last.CallID), tok.CallID, tok.Epoch)
		}
		if create && last.Value {
			return nil, fmt.Errorf("%w: %s (seq %d)", ErrExists, subject, last.Seq)
		}
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(HeaderSession, tok.Session)
		m.Header.Set(HeaderEpoch, strconv.FormatUint(tok.Epoch, 10))
		m.Header.Set(HeaderCall, tok.CallID)
		return m, nil
	})
}

// Raise records epoch of session as subject's fence without a business
// write, so that every later write of an older writer of session is
// refused. On a KV bucket the key keeps its value (written again, or a
// delete marker for a key without one); on another stream a marker
// message (HeaderMarker, no payload) is appended. It returns the sequence
// written, or 0 and no error when the subject is already fenced at epoch or
// higher for session (a newer writer wrote it, or an earlier raise).
func (s *Store) Raise(ctx context.Context, subject, session string, epoch uint64) (uint64, error) {
	if subject == "" || session == "" {
		return 0, fmt.Errorf("%w: subject %q, session %q", ErrInvalid, subject, session)
	}
	done := errors.New("already fenced")
	seq, err := s.cas(ctx, subject, func(last Record) (*nats.Msg, error) {
		if last.Seq > 0 && last.Session == session && last.Epoch >= epoch {
			return nil, done
		}
		m := nats.NewMsg(subject)
		switch {
		case !s.cfg.KV:
			m.Header.Set(HeaderMarker, "raise")
		case last.Value:
			m.Data = last.Data
		default:
			m.Header.Set(kvOperation, "DEL")
		}
		m.Header.Set(HeaderSession, session)
		m.Header.Set(HeaderEpoch, strconv.FormatUint(epoch, 10))
		return m, nil
	})
	if errors.Is(err, done) {
		return 0, nil
	}
	return seq, err
}

// cas reads subject's last message, asks build for the message to write
// (or an error that ends the write), and publishes it expecting that last
// sequence; a refused expectation reads again, up to MaxAttempts times.
// A transient failure (worker.Transient: a 503 while the stream elects a
// leader, a timeout, no responders) is retried too, with backoff: every
// publish of one write carries the same Nats-Msg-Id, and a read that finds
// that id on the subject's last message knows an earlier publish whose
// acknowledgement was lost stored it (the expected-sequence check runs
// before the server's dedup, so the retry itself is refused).
func (s *Store) cas(ctx context.Context, subject string, build func(Record) (*nats.Msg, error)) (uint64, error) {
	id := nuid.Next()
	wait := 5 * time.Millisecond
	var lastErr error
	for attempt := 0; attempt < s.cfg.MaxAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("fence: write %s: %w (last: %v)", subject, ctx.Err(), lastErr)
			case <-time.After(wait):
			}
			wait = min(2*wait, 500*time.Millisecond)
		}
		actx, cancel := context.WithTimeout(ctx, s.cfg.AttemptTimeout)
		last, err := s.Last(actx, subject)
		cancel()
		if err != nil {
			if worker.Transient(err) && ctx.Err() == nil {
				lastErr = err
				continue
			}
			return 0, err
		}
		if last.msgID == id {
			return last.Seq, nil // an earlier publish of this write landed
		}
		m, err := build(last)
		if err != nil {
			return 0, err
		}
		actx, cancel = context.WithTimeout(ctx, s.cfg.AttemptTimeout)
		ack, err := s.cfg.JS.PublishMsg(actx, m, jetstream.WithExpectLastSequencePerSubject(last.Seq), jetstream.WithMsgID(id))
		cancel()
		switch {
		case err == nil:
			return ack.Sequence, nil
		case wrongLast(err):
			// The subject changed since the read (perhaps by this very
			// write, whose acknowledgement was lost), or the read was served
			// by a replica behind the leader: read again.
			lastErr = err
		case worker.Transient(err) && ctx.Err() == nil:
			lastErr = err
		default:
			return 0, fmt.Errorf("fence: write %s: %w", subject, err)
		}
	}
	if wrongLast(lastErr) {
		return 0, fmt.Errorf("%w: %s after %d attempts", ErrContended, subject, s.cfg.MaxAttempts)
	}
	return 0, fmt.Errorf("fence: write %s: %w (after %d attempts)", subject, lastErr, s.cfg.MaxAttempts)
}

// wrongLast reports a refused Nats-Expected-Last-Subject-Sequence (10071;
// 10164 on a replicated stream with a write to the subject in flight).
func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
