package toolworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/internal/pause"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// Approvals in the tool worker (docs/protocol.md §17).
//
// A call whose tool asks for approval is parked by the runtime: its
// tool.call and approval.requested are on the log, its request is
// acknowledged, and nothing waits for it but one timer per session (its
// earliest deadline). The answers (jw.approvals.<session>) come through
// one durable consumer shared by all tool workers, one at a time: an
// answer for a session of a partition this worker owns is queued behind
// that session's work and runs in its goroutine; one for a partition
// another process owns is negatively acknowledged with PlanRetryDelay and
// comes back, possibly to the owner. A session's owner confirms it
// (fence, load) before it records anything: the
// runtime it builds waits again for every call the history leaves waiting,
// so an answer given while no worker owned the session is honoured by the
// next owner, once (the log holds at most one approval.granted per call,
// and a call that is no longer waiting refuses every answer). A worker
// that takes a partition confirms at once the sessions of it a previous
// owner left with waiting calls (resumeWaiting), so their deadlines hold
// even if nothing else comes for them.

// approvalConsumer creates or updates the tool workers' shared consumer of
// the answers (not the requests) on JW_APPROVALS.
func (w *Worker) approvalConsumer(ctx context.Context) (jetstream.Consumer, error) {
	return w.topo.ApprovalLog.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:        w.topo.Names().ApprovalConsumerName(),
		Description:    "jingwei tool workers: approvals and denials of waiting calls",
		FilterSubjects: []string{w.topo.Names().ApprovalsSubject("*"), stream.StopSubject(w.topo.Prefix, "*")},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        w.cfg.AckWait,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
}

// consumeApprovals routes every answer to its session's owner in this
// process, taking the session if nobody owns it.
func (w *Worker) consumeApprovals(ctx context.Context, cons jetstream.Consumer) {
	own := cons.CachedInfo()
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, pullWait)
		m, err := cons.Next(jetstream.FetchContext(fctx))
		cancel()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				w.log.Warn().Err(err).Msg("fetch of next approval failed")
				select {
				case <-ctx.Done():
				case <-time.After(w.cfg.PlanRetryDelay):
				}
			}
			continue
		}
		if _, ok := stream.DeliveredBy(m, own); !ok {
			// Another consumer's delivery on this pull's inbox: a task
			// stop that way would be a stop no host published.
			w.log.Warn().Str("subject", m.Subject()).Str("reply", m.Reply()).Msg("a message another consumer delivered on the approvals consumer's inbox dropped")
			continue
		}
		w.routeApproval(ctx, m)
	}
}

func (w *Worker) routeApproval(ctx context.Context, m jetstream.Msg) {
	if strings.HasSuffix(m.Subject(), ".stop") {
		w.routeStop(ctx, m)
		return
	}
	id := stream.SessionOf(m.Subject())
	a, err := schema.DecodeApproval(m.Data())
	if err == nil && a.Session != id {
		err = schema.Errorf(schema.CodeInvalidApproval, "approval for session %q published on %q's subject", a.Session, id)
	}
	if err == nil {
		// The signature is checked before any session is touched: a
		// forged answer never fences anything.
		err = recovery.VerifyApproval(a, id, a.CallID, w.cfg.Runtime.TrustedApprovers)
	}
	if err != nil {
		w.log.Warn().Err(err).Str("session", id).Str("call_id", a.CallID).Msg("approval refused (kept in JW_APPROVALS)")
		_ = m.TermWithReason(schema.TextOf(err))
		return
	}
	if !w.post(id, m, func(s *session) { s.runApproval(a, m) }) {
		_ = m.NakWithDelay(w.cfg.PlanRetryDelay)
	}
}

// post queues fn behind the work of session id, if this worker owns the
// session's partition; false otherwise (or when the partition stops).
func (w *Worker) post(id string, m jetstream.Msg, fn func(*session)) bool {
	w.mu.Lock()
	p := w.parts[w.topo.Names().PartitionOf(id)]
	w.mu.Unlock()
	return p != nil && p.post(id, m, fn)
}

// runApproval answers a waiting call (in the session goroutine).
func (s *session) runApproval(a schema.Approval, m jetstream.Msg) {
	lg := s.p.log.With().Str("session", s.id).Str("call_id", a.CallID).Str("decision", string(a.Decision)).Str("approver", a.Approver).Logger()
	if s.rt == nil {
		// Before fencing anything: is the call still waiting at all? (An
		// answer redelivered after it was honoured, or one for a call that
		// timed out, needs no session.)
		h, err := s.w.topo.Logs().Load(s.p.work, s.id)
		if err == nil && !waitsIn(h, a.CallID) {
			lg.Info().Msg("answer for a call that does not wait (any more); acknowledged, nothing done")
			_ = m.Ack()
			return
		}
	}
	if err := s.confirm(s.p.work); err != nil {
		lg.Warn().Err(err).Msg("session log not confirmed; answer left for redelivery")
		_ = m.NakWithDelay(s.w.cfg.PlanRetryDelay)
		return
	}
	if s.hold.Err() != nil {
		_ = m.NakWithDelay(s.w.cfg.PlanRetryDelay)
		return
	}
	var received time.Time
	if md, err := m.Metadata(); err == nil {
		received = md.Timestamp
	}
	res, err := s.rt.Resume(s.p.work, a, received)
	switch code := schema.CodeOf(err); {
	case code == schema.CodeInvalidApproval:
		lg.Info().Err(err).Msg("answer refused")
		_ = m.Ack()
	case code == schema.CodeLog || code == schema.CodeFenced:
		// The next owner finds the call still waiting (answer left for it)
		// or approved and not started (not_started: the answer is spent).
		lg.Warn().Err(err).Msg("answer not recorded; left for redelivery")
		_ = m.NakWithDelay(s.w.cfg.PlanRetryDelay)
		s.rt, s.hold = nil, nil // confirm again before the next item
	default:
		lg.Info().Str("status", string(res.Status)).Str("stage", string(res.Stage)).Msg("answered call done")
		_ = m.Ack()
	}
	s.armDeadline()
}

// waitsIn reports whether callID waits for approval at the end of h.
func waitsIn(h []schema.Event, callID string) bool {
	for _, p := range recovery.ApprovalsOf(h).Pending {
		if p.CallID == callID {
			return true
		}
	}
	return false
}

// resumeWaiting runs once the partition is taken: it finds the sessions
// of the partition whose log still has a call waiting for approval — a
// crashed owner may have left them, with nothing else queued for them —
// and queues a confirm for each (resume), so that their deadlines are kept
// without waiting for other work. Candidates are the sessions with
// approval requests on JW_APPROVALS (one stream info with a subject filter,
// jw.approvals.*.request, read once per take), of this partition; each is
// loaded (reads only) and only one whose history leaves a call waiting is
// confirmed: a session with no waiting call is never fenced. A read that
// fails is tried again, every PlanRetryDelay, until ctx ends.
func (p *partition) resumeWaiting(ctx context.Context) {
	var todo []string
	for ctx.Err() == nil {
		ids, err := p.approvalSessions(ctx)
		if err == nil {
			todo = ids
			break
		}
		if ctx.Err() == nil {
			p.log.Warn().Err(err).Msg("reading the approval requests failed; tried again")
		}
		if !sleepCtx(ctx, p.w.cfg.PlanRetryDelay) {
			return
		}
	}
	resumed := 0
	for len(todo) > 0 && ctx.Err() == nil {
		var again []string
		for _, id := range todo {
			if ctx.Err() != nil {
				return
			}
			h, err := p.w.topo.Logs().Load(ctx, id)
			if err != nil {
				if unrecordable(err) != "" {
					// Full or corrupt: nothing can be recorded on it;
					// its calls stay as they are (recovery reports them).
					p.log.Warn().Err(err).Str("session", id).Msg("session with approval requests not readable; not resumed")
					continue
				}
				again = append(again, id)
				continue
			}
			if len(recovery.ApprovalsOf(h).Pending) == 0 {
				continue
			}
			if !p.post(id, nil, func(s *session) { s.resume() }) {
				return
			}
			resumed++
		}
		if len(again) > 0 {
			p.log.Warn().Int("sessions", len(again)).Msg("session logs with approval requests not read; tried again")
			if !sleepCtx(ctx, p.w.cfg.PlanRetryDelay) {
				return
			}
		}
		todo = again
	}
	if resumed > 0 {
		p.log.Info().Int("sessions", resumed).Msg("sessions with calls waiting for approval resumed")
	}
}

// approvalSessions returns the sessions of the partition that have
// approval requests on JW_APPROVALS, sorted.
func (p *partition) approvalSessions(ctx context.Context) ([]string, error) {
	t := p.w.topo
	info, err := t.ApprovalLog.Info(ctx, jetstream.WithSubjectFilter(t.Names().ApprovalRequestsSubject("*")))
	if err != nil {
		return nil, err
	}
	pre := t.Names().ApprovalsSubject("")
	var out []string
	for subj := range info.State.Subjects {
		id, ok := strings.CutSuffix(strings.TrimPrefix(subj, pre), ".request")
		if !ok || id == "" || strings.Contains(id, ".") || t.Names().PartitionOf(id) != p.p {
			continue
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// resume confirms a session found with calls waiting for approval when the
// partition was taken (in the session goroutine): confirmed() expires the
// calls past their deadline, asks again for the others and arms the timer.
// A session already confirmed has its timer. A confirm that fails is tried
// again after PlanRetryDelay while the partition is owned. (A session
// whose call's result was not recorded is confirmed the same way: confirm
// fences the call left open.)
func (s *session) resume() {
	if s.rt != nil && s.hold.Err() == nil {
		return
	}
	if err := s.confirm(s.p.work); err != nil {
		if s.p.work.Err() != nil {
			return
		}
		s.p.log.Warn().Err(err).Str("session", s.id).Msg("session not confirmed; tried again")
		id, p := s.id, s.p
		time.AfterFunc(s.w.cfg.PlanRetryDelay, func() { p.post(id, nil, func(s *session) { s.resume() }) })
	}
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool { return pause.For(ctx, d) == nil }

// confirmed runs once the session's runtime exists: calls a crashed owner
// left waiting past their deadline end now, the others are asked again
// (their request may never have been published) and the timer is armed.
func (s *session) confirmed() {
	s.answerOverdue(s.p.work)
	s.rt.Expire(s.p.work, time.Now())
	s.rt.AskAgain(s.p.work)
	s.armDeadline()
}

// answerOverdue honours, before the calls past their deadline expire, the
// answers JW_APPROVALS received for them in time: one given before the
// deadline while nobody owned the session, which the shared consumer has
// not brought back yet, must not lose to the timeout. It reads the
// session's answers (jw.approvals.<session>, an ordered consumer: only
// when a call is overdue, so after a crash or a long hand-over) and
// resumes each overdue call with its first trusted answer; Resume decides
// on the answer's stream timestamp, so an answer received after the
// deadline still ends the call rejected. When the answers cannot be read
// the overdue calls expire as if unanswered (logged).
func (s *session) answerOverdue(ctx context.Context) {
	now := time.Now()
	due := map[string]time.Time{}
	for _, wc := range s.rt.Waiting() {
		if !wc.Deadline.After(now) {
			due[wc.CallID] = wc.Deadline
		}
	}
	if len(due) == 0 {
		return
	}
	lg := s.p.log.With().Str("session", s.id).Logger()
	answers, err := s.w.answersOf(ctx, s.id)
	if err != nil {
		lg.Warn().Err(err).Int("calls", len(due)).Msg("answers of calls past their deadline not read; they expire unanswered")
		return
	}
	for _, m := range answers {
		a, err := schema.DecodeApproval(m.data)
		if err != nil || a.Session != s.id {
			continue
		}
		deadline, ok := due[a.CallID]
		if !ok || m.at.After(deadline) {
			continue
		}
		if recovery.VerifyApproval(a, s.id, a.CallID, s.w.cfg.Runtime.TrustedApprovers) != nil {
			continue
		}
		delete(due, a.CallID)
		res, err := s.rt.Resume(ctx, a, m.at)
		ev := lg.Info()
		if err != nil && schema.CodeOf(err) != schema.CodeRejected {
			ev = lg.Warn().Err(err)
		}
		ev.Str("call_id", a.CallID).Str("decision", string(a.Decision)).Str("status", string(res.Status)).Msg("answer received before the deadline honoured after it")
		if c := schema.CodeOf(err); c == schema.CodeLog || c == schema.CodeFenced {
			return
		}
	}
}

// storedAnswer is an answer read from JW_APPROVALS with its stream
// timestamp.
type storedAnswer struct {
	data []byte
	at   time.Time
}

// answersOf reads the answers stored on jw.approvals.<id>, in stream
// order, with an ordered consumer (the worker role may consume
// JW_APPROVALS but not get its messages directly).
func (w *Worker) answersOf(ctx context.Context, id string) ([]storedAnswer, error) {
	subj := w.topo.Names().ApprovalsSubject(id)
	info, err := w.topo.ApprovalLog.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return nil, err
	}
	n := info.State.Subjects[subj]
	if n == 0 {
		return nil, nil
	}
	cons, err := w.topo.ApprovalLog.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}, InactiveThreshold: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	defer func() {
		// The server would drop it after InactiveThreshold anyway.
		if ci := cons.CachedInfo(); ci != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
			_ = w.topo.ApprovalLog.DeleteConsumer(dctx, ci.Name)
			cancel()
		}
	}()
	out := make([]storedAnswer, 0, n)
	for idle := 0; ; {
		batch, err := cons.Fetch(int(min(n, 256)), jetstream.FetchMaxWait(pullWait))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			out = append(out, storedAnswer{data: m.Data(), at: md.Timestamp})
			if md.NumPending == 0 {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if got == 0 {
			if idle++; idle > 3 {
				return out, fmt.Errorf("answers of %s: %d of %d read, then nothing", id, len(out), n)
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// armDeadline sets the session's one approval timer to the earliest
// deadline of its waiting calls (a timer, not a goroutine per call).
// It runs in the session goroutine; parked records whether any call
// waits (such a session stays in memory, see partition.keepHeld). A
// session whose runtime was dropped (a failed attempt) keeps its timer:
// when it fires, the session is confirmed again first.
func (s *session) armDeadline() {
	if s.rt == nil {
		return
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.deadline != nil {
		s.deadline.Stop()
		s.deadline = nil
	}
	next, ok := s.rt.NextDeadline()
	s.parked.Store(ok)
	if !ok {
		return
	}
	s.deadline = time.AfterFunc(time.Until(next)+10*time.Millisecond, func() {
		s.p.post(s.id, nil, func(s *session) {
			if err := s.confirm(s.p.work); err != nil { // confirmed() expires what is due
				s.p.log.Warn().Err(err).Str("session", s.id).Msg("session log not confirmed; approval deadline handled by the next owner")
				return
			}
			s.rt.Expire(s.p.work, time.Now())
			s.armDeadline()
		})
	})
}

// routeStop routes a host's task stop to the session's owner in this
// process (taking the session if nobody owns it), which records
// task.stopped.
func (w *Worker) routeStop(ctx context.Context, m jetstream.Msg) {
	parts := strings.Split(m.Subject(), ".")
	id := ""
	if len(parts) == 4 {
		id = parts[2]
	}
	var st schema.StopRequest
	err := schema.Unmarshal(m.Data(), &st)
	if err == nil {
		err = st.Validate()
	}
	if err == nil && st.Session != id {
		err = schema.Errorf(schema.CodeBadRequest, "stop for session %q published on %q's subject", st.Session, id)
	}
	if err != nil {
		w.log.Warn().Err(err).Str("session", id).Msg("task stop refused (kept in JW_APPROVALS)")
		_ = m.TermWithReason(schema.TextOf(err))
		return
	}
	if !w.post(id, m, func(s *session) { s.runStop(st, m) }) {
		_ = m.NakWithDelay(w.cfg.PlanRetryDelay)
	}
}

// runStop records a task stop (in the session goroutine).
func (s *session) runStop(st schema.StopRequest, m jetstream.Msg) {
	if err := s.confirm(s.p.work); err != nil {
		s.p.log.Warn().Err(err).Str("session", s.id).Str("task", st.Task).Msg("session log not confirmed; stop left for redelivery")
		_ = m.NakWithDelay(s.w.cfg.PlanRetryDelay)
		return
	}
	if err := s.rt.StopTask(s.p.work, st.Task, schema.StoppedByHost, st.Reason); err != nil {
		s.p.log.Warn().Err(err).Str("session", s.id).Str("task", st.Task).Msg("task.stopped not recorded; left for redelivery")
		_ = m.NakWithDelay(s.w.cfg.PlanRetryDelay)
		s.rt, s.hold = nil, nil // confirm again before the next item
		return
	}
	_ = m.Ack()
}
