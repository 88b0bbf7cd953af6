package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/fence"
)

// The names the harness reads, as the protocol document gives them
// (default prefixes "jw" and "tools").
const (
	streamEvents      = "JW_EVENTS"
	streamRequests    = "JW_REQUESTS"
	streamReviews     = "JW_REVIEWS"
	streamPlans       = "JW_PLANS"
	streamAssessments = "JW_ASSESSMENTS"
	streamAnswers     = "JW_ANSWERS"
	streamLedger      = "TOOLS_LEDGER"
	streamOrders      = "KV_tools_orders"

	headerOwner        = "Jw-Owner"
	headerAssessmentID = "Jw-Assessment-Id"
	headerKVOperation  = "KV-Operation"

	subjectPrefix = "jw"
	// ledgerSubject is the stem of payments.charge's per-session ledger
	// subjects (tools.ledger.<session>).
	ledgerSubject = "tools.ledger"
)

// rawMsg is one stored message.
type rawMsg struct {
	Subject string
	Seq     uint64
	Time    time.Time
	Header  nats.Header
	Data    []byte
}

// readStream reads every message of a stream, from its first to the last
// sequence its info reported when the read began, through an ordered
// consumer (which the client re-creates across a leader change). A
// missing stream is empty. The read is retried from the start on an
// error, until ctx ends.
func readStream(ctx context.Context, js jetstream.JetStream, name string) ([]rawMsg, error) {
	var lastErr error
	for attempt := 0; ; attempt++ {
		msgs, err := readStreamOnce(ctx, js, name)
		if err == nil {
			return msgs, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read %s: %w (after %d attempts)", name, lastErr, attempt+1)
		case <-time.After(time.Duration(min(attempt+1, 10)) * 200 * time.Millisecond):
		}
	}
}

func readStreamOnce(ctx context.Context, js jetstream.JetStream, name string) ([]rawMsg, error) {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ictx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ictx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	last := info.State.LastSeq
	cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{InactiveThreshold: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	out := make([]rawMsg, 0, info.State.Msgs)
	idle := 0
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			out = append(out, rawMsg{Subject: m.Subject(), Seq: meta.Sequence.Stream, Time: meta.Timestamp, Header: m.Headers(), Data: m.Data()})
			if meta.Sequence.Stream >= last {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if got == 0 {
			if idle++; idle > 5 {
				return nil, fmt.Errorf("stream %s: no message after seq %d for 10s, the stream ends at %d", name, lastSeqOf(out), last)
			}
		} else {
			idle = 0
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

func lastSeqOf(ms []rawMsg) uint64 {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Seq
}

// readSnapshot reads every stream the invariants use, as admin. Only the
// run's own sessions (those starting with sessionPrefix) and business
// records (markers starting with markerPrefix) are kept, so that a run
// against a deployment with other traffic judges its own actions only.
func readSnapshot(ctx context.Context, js jetstream.JetStream, sessionPrefix, markerPrefix string) (*snapshot, error) {
	s := &snapshot{At: time.Now(), Undecodable: map[string]int{}}
	// mine keeps the messages of this run's sessions on kind's subjects.
	mine := func(kind string) func(rawMsg) bool {
		return func(m rawMsg) bool {
			return strings.HasPrefix(m.Subject, subjectPrefix+"."+kind+"."+sessionPrefix)
		}
	}
	for _, part := range []struct {
		stream string
		add    func([]rawMsg)
	}{
		{streamEvents, func(msgs []rawMsg) { s.addEvents(msgs, mine("events")) }},
		{streamAssessments, func(msgs []rawMsg) { s.addAssessments(msgs, mine("assessments")) }},
		{streamReviews, func(msgs []rawMsg) { s.addReviews(msgs, mine("reviews")) }},
		{streamPlans, func(msgs []rawMsg) { s.addPlans(msgs, mine("plans")) }},
		{streamAnswers, func(msgs []rawMsg) { s.addAnswers(msgs, mine("answers")) }},
		{streamLedger, func(msgs []rawMsg) { s.addCharges(msgs, markerPrefix) }},
		{streamOrders, func(msgs []rawMsg) { s.addOrders(msgs, markerPrefix) }},
	} {
		msgs, err := readStream(ctx, js, part.stream)
		if err != nil {
			return nil, err
		}
		part.add(msgs)
	}
	var err error
	if s.PendingRequests, err = pendingRequests(ctx, js, sessionPrefix); err != nil {
		return nil, err
	}
	return s, nil
}

// addEvents adds the session log events; one the strict decoder refuses
// is counted undecodable and still kept if plain JSON reads it.
func (s *snapshot) addEvents(msgs []rawMsg, mine func(rawMsg) bool) {
	for _, m := range msgs {
		if !mine(m) {
			continue
		}
		ev, err := schema.DecodeEvent(m.Data)
		if err != nil {
			s.Undecodable[streamEvents]++
			if json.Unmarshal(m.Data, &ev) != nil {
				continue
			}
		}
		ev.Seq = m.Seq
		s.Events = append(s.Events, logEvent{Seq: m.Seq, Time: m.Time, Owner: m.Header.Get(headerOwner), Event: ev})
	}
}

// addAssessments adds the assessments: one per message or a batch of them
// (docs/protocol.md §5.4), each member one entry with its own
// Jw-Assessment-Id value.
func (s *snapshot) addAssessments(msgs []rawMsg, mine func(rawMsg) bool) {
	for _, m := range msgs {
		if !mine(m) {
			continue
		}
		as, err := schema.DecodeAssessments(m.Data)
		if err != nil {
			s.Undecodable[streamAssessments]++
			if as = looseAssessments(m.Data); as == nil {
				continue
			}
		}
		ids := m.Header.Values(headerAssessmentID)
		for i, a := range as {
			id := ""
			if len(ids) == len(as) {
				id = ids[i]
			}
			s.Assessments = append(s.Assessments, assessmentMsg{Seq: m.Seq, Time: m.Time, ID: id, Assessment: a})
		}
	}
}

func (s *snapshot) addReviews(msgs []rawMsg, mine func(rawMsg) bool) {
	for _, m := range msgs {
		if !mine(m) {
			continue
		}
		var r schema.Review
		if json.Unmarshal(m.Data, &r) != nil {
			s.Undecodable[streamReviews]++
			continue
		}
		s.Reviews = append(s.Reviews, reviewMsg{Seq: m.Seq, Time: m.Time, Review: r})
	}
}

func (s *snapshot) addPlans(msgs []rawMsg, mine func(rawMsg) bool) {
	for _, m := range msgs {
		if !mine(m) {
			continue
		}
		var p schema.Plan
		if json.Unmarshal(m.Data, &p) != nil {
			s.Undecodable[streamPlans]++
			continue
		}
		s.Plans = append(s.Plans, planMsg{Seq: m.Seq, Time: m.Time, Plan: p})
	}
}

func (s *snapshot) addAnswers(msgs []rawMsg, mine func(rawMsg) bool) {
	for _, m := range msgs {
		if !mine(m) {
			continue
		}
		var a schema.Answer
		if json.Unmarshal(m.Data, &a) != nil {
			s.Undecodable[streamAnswers]++
			continue
		}
		s.Answers = append(s.Answers, answerMsg{Seq: m.Seq, Time: m.Time, Answer: a})
	}
}

// addCharges adds the ledger's charges of this run's accounts, each with
// its writer's epoch and the highest epoch written to its subject before
// it (the fence it met).
func (s *snapshot) addCharges(msgs []rawMsg, markerPrefix string) {
	fences := map[string]uint64{} // ledger subject + session → highest epoch written so far
	for _, m := range msgs {
		var c chargeRecord
		fk := m.Subject + " " + m.Header.Get(fence.HeaderSession)
		epoch, _ := strconv.ParseUint(m.Header.Get(fence.HeaderEpoch), 10, 64)
		c.Epoch, c.Fence = epoch, fences[fk]
		fences[fk] = max(fences[fk], epoch)
		if m.Header.Get(fence.HeaderMarker) != "" {
			continue // a reviewer's raised fence (package worker/fence), not a charge
		}
		if !decodeJSON(m.Data, &c) {
			s.Undecodable[streamLedger]++
			continue
		}
		if !strings.HasPrefix(c.Account, markerPrefix) {
			continue
		}
		c.Seq, c.Time = m.Seq, m.Time
		s.Charges = append(s.Charges, c)
	}
}

// addOrders adds the orders of this run's customers as the orders bucket
// holds them last (a deleted or purged key holds none), in key order of
// first write.
func (s *snapshot) addOrders(msgs []rawMsg, markerPrefix string) {
	latest := map[string]*orderRecord{} // KV key → its last value
	var keys []string
	for _, m := range msgs {
		key := strings.TrimPrefix(m.Subject, "$KV.tools_orders.")
		if op := m.Header.Get(headerKVOperation); op == "DEL" || op == "PURGE" {
			delete(latest, key)
			continue
		}
		var o orderRecord
		if !decodeJSON(m.Data, &o) {
			s.Undecodable[streamOrders]++
			continue
		}
		if _, seen := latest[key]; !seen {
			keys = append(keys, key)
		}
		latest[key] = &o
	}
	for _, k := range keys {
		if o := latest[k]; o != nil && strings.HasPrefix(o.Customer, markerPrefix) {
			s.Orders = append(s.Orders, *o)
		}
	}
}

// pendingRequests counts the run's requests still in the work queue.
func pendingRequests(ctx context.Context, js jetstream.JetStream, sessionPrefix string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, streamRequests)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subjectPrefix+".requests.>"))
	if err != nil {
		return 0, err
	}
	var n uint64
	// Stored as jw.requests.<partition>.<session> (the stream's subject
	// transform adds the partition).
	for subj, c := range info.State.Subjects {
		if strings.HasPrefix(stream.SessionOf(subj), sessionPrefix) {
			n += c
		}
	}
	return n, nil
}

// looseAssessments reads an assessment message the strict decoder refused
// with encoding/json, an object or an array of them, so the invariants
// still see what it says; nil if it is neither.
func looseAssessments(data []byte) []schema.Assessment {
	var one schema.Assessment
	if json.Unmarshal(data, &one) == nil {
		return []schema.Assessment{one}
	}
	var many []schema.Assessment
	if json.Unmarshal(data, &many) == nil && len(many) > 0 {
		return many
	}
	return nil
}
