package recovery

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// Inspect reads the history h once, verifies it and classifies the latest
// attempt of callID by the decision table of docs/protocol.md §9. h must be one
// session's confirmed log, in log order, every event with its seq.
//
// Errors are *schema.Error with the codes of docs/protocol.md §9: field_too_long (for
// callID itself or any key, call id or contract revision in the history),
// corrupt_history and history_too_large (anywhere in the history, also when
// callID is fine), then unknown_call, superseded_call (Error.Latest names
// the latest call of the chain) and legacy_call. An error yielded by h that
// is not a *schema.Error (an I/O failure of the source) is returned wrapped,
// uncoded. The whole history is read even when callID is not in it.
//
// corrupt_history covers every check of docs/protocol.md §9 and, beyond its list: a
// history holding events of more than one session (a session log holds
// exactly one), an event without seq, a rejected result without a valid
// stage or after tool.started, a call in the combined form (call.started)
// followed by a tool.started, an approval or a rejection, a stage on
// another status, an operation without task, key or valid contract, and a
// retry of a call that completed with ok (no plan is ever issued for one). Unknown event types do not
// affect the classification, but their seq, session and epoch are checked.
//
// The log proves its fences: an event (of any type) whose epoch is below
// the epoch of a session.fenced earlier in the log was written by a fenced
// writer, and a session.fenced whose fence epoch is below an earlier one's
// takes ownership back; both are corrupt_history, and so is an epoch (an
// event's, or a fence's) above schema.MaxEpoch (2^53-1), even when the
// reader let it through. A fence with the same epoch as an earlier one is
// fine (the same owner fenced twice). The messages name the event's seq,
// both epochs and the seq of the fence.
//
// Inspect counts events itself (more than schema.MaxHistoryEvents is
// history_too_large); the byte limit is the reader's (schema.HistoryReader).
// Arguments are canonicalized only where a check needs them: those of
// callID, and those of a retry and its prior call when their bytes differ
// (identical bytes are identical canonical arguments). The arguments of
// other calls are not checked beyond what h checked (schema.HistoryReader
// checks every event's). Safe for concurrent use; h is consumed once.
func Inspect(h schema.History, callID string) (schema.Assessment, error) {
	s, err := scanFor(h, callID, false)
	if err != nil {
		return schema.Assessment{}, err
	}
	return s.assess(), nil
}

// call is what one pass keeps per call: what later events are checked
// against, never the events themselves. It keeps a copy of its arguments
// (a history source may reuse its buffers) only while a retry may still
// compare against them: a call that ended ok can have no valid retry, so
// its copy is dropped with its result (but the target's is kept; a small
// copy shares its block with others, see copyArgs). The
// fields are ordered, and the status, stage and contract kept as small
// codes, so that a call takes 144 bytes: a 100,000-event history holds
// some 20,000 calls, and their memory is most of Inspect's own.
type call struct {
	id       string
	tool     string
	task     string
	key      string
	revision string // of the contract
	args     []byte // a copy of the arguments while needed, else nil
	seq      uint64
	resSeq   uint64 // seq of the result, 0 while none
	n        int32  // the event's position in the history (1-based), for messages
	prior    int32  // index of the attempt this one retries, or -1
	next     int32  // index of the retry that follows this one, or -1
	effect   effect.Effect
	status   uint8 // index in statuses: 0 while no result
	stage    uint8 // index in stages: 0 for none
	started  bool
	marker   bool
	combined bool // recorded with call.started (the start is in the tool.call)
	legacy   bool
	asked    bool // approval.requested recorded (approval.go)
	granted  bool // approval.granted recorded
}

// contract returns the call's contract.
func (c *call) contract() effect.Contract {
	return effect.Contract{Effect: c.effect, Revision: c.revision}
}

// statuses are the result statuses by their code in call.status (0: no
// result), stages the rejection stages by theirs in call.stage (0: none):
// schema's tables, behind a zero code.
var (
	statuses = append([]schema.Status{""}, schema.Statuses()...)
	stages   = append([]schema.Stage{""}, schema.Stages()...)
	statusOK = uint8(codeOf(statuses, schema.StatusOK))
)

// codeOf returns the index of v in list, or -1.
func codeOf[T comparable](list []T, v T) int {
	for i, c := range list {
		if c == v {
			return i
		}
	}
	return -1
}

// scan is the state of one pass over a history.
type scan struct {
	target  string
	session string
	n       int      // events seen
	lastSeq uint64   // seq of the previous event
	chunks  [][]call // the calls in log order, callChunk to a chunk
	count   int32
	// byID indexes calls [0, mapped) by id. It is filled only when a
	// lookup misses the last recentCalls calls (index), so a history whose
	// started and result events follow their calls closely never builds it.
	byID   map[string]int32
	mapped int32
	// ids and ops hold, per call in log order, the hash of its id and (for
	// a call with an operation and no retry link) of its task and key,
	// each with the call's index in the low bits: dups finds a repeated
	// id or key from them once (firstRepeat), instead of a map insert per
	// call (see dups for why the answer is the same).
	ids, ops []uint64
	// pendingID is the id of the tool.call being checked once its length
	// is known, until it is pushed ("" otherwise): if another check of
	// that event fails, a duplicate id still comes first (firstError).
	pendingID string
	argBlock  []byte    // the free end of the block copyArgs copies small arguments into
	tgt       int32     // index of the call with the target's id, else -1
	idx       int32     // the target's index once verified, else -1
	pairs     []argPair // retries whose argument bytes differ from their prior's
	canon     []byte    // the target's canonical arguments, once run has checked them
	digest    string    // and their schema.ArgsDigest
	fence     uint64    // the highest fence epoch so far, 0 before the first session.fenced
	fenceAt   uint64    // the seq of the first session.fenced with that epoch
	// links holds a copy of every retry's link by the retry's index, kept
	// only for RequireSignedPlans (nil otherwise)
	links map[int32]schema.RetryLink
	// stopped maps every task stopped so far to the seq of its
	// task.stopped (approval.go); nil before the first.
	stopped map[string]uint64
}

// argPair is a retry whose argument bytes differ from its prior call's:
// their canonical forms are compared once the whole history has been read.
type argPair struct {
	idx         int32 // the retry
	prior, args []byte
}

// scanFor reads h and returns the verified scan positioned on callID's
// latest attempt; with keepLinks it keeps every retry link (s.links).
func scanFor(h schema.History, callID string, keepLinks bool) (*scan, error) {
	if len(callID) > schema.MaxFieldBytes {
		return nil, schema.Errorf(schema.CodeFieldTooLong, "call id to inspect is %d bytes (limit %d)", len(callID), schema.MaxFieldBytes)
	}
	s := &scan{
		target: callID,
		tgt:    -1,
		idx:    -1,
	}
	if keepLinks {
		s.links = make(map[int32]schema.RetryLink)
	}
	if err := s.run(h); err != nil {
		return nil, err
	}
	i := s.tgt
	if i < 0 {
		return nil, schema.Errorf(schema.CodeUnknownCall, "call %q is not in the history (%d events, %d calls)", callID, s.n, int(s.count))
	}
	c := s.at(i)
	if c.next >= 0 {
		last := c.next
		for s.at(last).next >= 0 {
			last = s.at(last).next
		}
		e := schema.Errorf(schema.CodeSupersededCall, "call %q already has a later attempt: the latest in its chain is %q", callID, s.at(last).id)
		e.Latest = s.at(last).id
		return nil, e
	}
	if c.legacy {
		return nil, schema.Errorf(schema.CodeLegacyCall, "call %q (seq %d) has no operation (legacy format): no stable key to retry with", callID, c.seq)
	}
	if err := c.pendingApproval(); err != nil {
		return nil, err
	}
	s.idx = i
	return s, nil
}

// run reads the whole history, then canonicalizes the arguments the checks
// need (every history error comes first, as the whole history is read
// first): the target's, unless it completed and is no retry (nothing uses
// them then), and both sides of every retry whose bytes differ from its
// prior call's. An argument error is reported for the first such call in
// log order, then the first retry whose canonical arguments differ.
func (s *scan) run(h schema.History) error {
	if err := s.read(h); err != nil {
		return err
	}
	type canonArgs struct {
		idx   int32
		args  []byte
		canon []byte
	}
	need := make([]canonArgs, 0, 2*len(s.pairs)+1)
	target, found := s.tgt, s.tgt >= 0
	if found {
		if c := s.at(target); !c.legacy && (c.status != statusOK || c.prior >= 0) {
			need = append(need, canonArgs{idx: target, args: c.args})
		} else {
			found = false
		}
	}
	for _, p := range s.pairs {
		need = append(need, canonArgs{idx: s.at(p.idx).prior, args: p.prior}, canonArgs{idx: p.idx, args: p.args})
	}
	slices.SortStableFunc(need, func(a, b canonArgs) int { return cmp.Compare(a.idx, b.idx) })
	need = slices.CompactFunc(need, func(a, b canonArgs) bool { return a.idx == b.idx })
	for i := range need {
		n := &need[i]
		canon, err := canonical(n.args)
		if err != nil {
			c := s.at(n.idx)
			return schema.Errorf(schema.CodeCorruptHistory, "call %q (seq %d): arguments: %v", c.id, c.seq, err)
		}
		n.canon = canon
	}
	canonOf := func(idx int32) []byte {
		k, _ := slices.BinarySearchFunc(need, idx, func(a canonArgs, i int32) int { return cmp.Compare(a.idx, i) })
		return need[k].canon
	}
	for _, p := range s.pairs {
		a, b := canonOf(p.idx), canonOf(s.at(p.idx).prior)
		if !bytes.Equal(a, b) {
			c, pc := s.at(p.idx), s.at(s.at(p.idx).prior)
			return schema.Errorf(schema.CodeCorruptHistory, "call %q (seq %d) retries call %q with different arguments (%s, prior %s)", c.id, c.seq, pc.id, digestOf(a), digestOf(b))
		}
	}
	if found {
		s.canon = canonOf(target)
		s.digest = digestOf(s.canon)
	}
	return nil
}

// read checks every event of h in order, then the call ids and operation
// keys for repeats (dups); the first problem in log order is the error.
func (s *scan) read(h schema.History) error {
	if h == nil {
		return nil
	}
	for ev, err := range h {
		if err != nil {
			var se *schema.Error
			if !errors.As(err, &se) {
				err = fmt.Errorf("recovery: reading history after %d events: %w", s.n, err)
			}
			return s.firstError(err)
		}
		if err := s.event(&ev); err != nil {
			return s.firstError(err)
		}
	}
	return s.dups()
}

// firstError returns the error of the first problem in log order, given
// err, the problem of the current event (or of the source): a repeated
// call id or operation key among the calls read so far is earlier, and a
// repeated id of the current tool.call is checked at that event before
// anything that may have failed after it (onCall's order).
func (s *scan) firstError(err error) error {
	if d := s.dups(); d != nil {
		return d
	}
	if id := s.pendingID; id != "" {
		if i, ok := s.index(id); ok {
			return schema.Errorf(schema.CodeCorruptHistory, "event %d (seq %d): duplicate call_id %q (first at seq %d)", s.n, s.lastSeq, id, s.at(i).seq)
		}
	}
	return err
}

// dups returns the corrupt_history error of the first call, in log
// order, whose id an earlier call has, or that uses the task and key of
// an earlier call without a retry link (at the same call, the id comes
// first, as in onCall); nil when there is none. Checking here, once the
// history has been read or has failed, instead of at each call gives the
// same answer: nothing a repeat changes later can be reported before it
// (read and firstError ask dups first), and every other check of the
// repeating event comes after the id check (firstError) or before the key
// check (a call is pushed only when all of them passed).
func (s *scan) dups() error {
	idAt, idFirst := s.firstRepeat(s.ids, func(a, b *call) bool { return a.id == b.id })
	opAt, opFirst := s.firstRepeat(s.ops, func(a, b *call) bool { return a.task == b.task && a.key == b.key })
	switch {
	case idAt >= 0 && (opAt < 0 || idAt <= opAt):
		c := s.at(idAt)
		return schema.Errorf(schema.CodeCorruptHistory, "event %d (seq %d): duplicate call_id %q (first at seq %d)", c.n, c.seq, c.id, s.at(idFirst).seq)
	case opAt >= 0:
		c := s.at(opAt)
		return schema.Errorf(schema.CodeCorruptHistory, "event %d (seq %d): call %q reuses operation key %q of task %q, first used by call %q, without a retry link", c.n, c.seq, c.id, c.key, c.task, s.at(opFirst).id)
	}
	return nil
}

// firstRepeat returns the lowest index whose call is the same as an
// earlier one's (same decides; equal hash bits only make two calls
// candidates), with the first of those; -1, -1 when there is none.
// entries hold a hash above ordBits and a call's index below, in index
// order. Instead of sorting them, it spreads them by their top hash bits
// over about len/4 buckets, keeping index order within each (a counting
// sort on those bits alone), and compares within a bucket: a few entries
// each, as the hashes are seeded per process.
func (s *scan) firstRepeat(entries []uint64, same func(a, b *call) bool) (at, first int32) {
	at, first = -1, -1
	if len(entries) < 2 {
		return at, first
	}
	shift := 64 - max(bits.Len(uint(len(entries)))-2, 1)
	count := make([]int32, 1<<(64-shift)+1)
	for _, e := range entries {
		count[e>>shift+1]++
	}
	for b := 1; b < len(count); b++ {
		count[b] += count[b-1]
	}
	spread := make([]uint64, len(entries))
	next := slices.Clone(count[:len(count)-1])
	for _, e := range entries {
		spread[next[e>>shift]] = e
		next[e>>shift]++
	}
	for b := 0; b+1 < len(count); b++ {
		bucket := spread[count[b]:count[b+1]]
		for j := 1; j < len(bucket); j++ {
			cj := int32(bucket[j] & ordMask)
			if at >= 0 && cj >= at {
				break // index order: the rest of the bucket comes later still
			}
			for i := range j {
				ci := int32(bucket[i] & ordMask)
				if bucket[i]&^ordMask == bucket[j]&^ordMask && same(s.at(ci), s.at(cj)) {
					at, first = cj, ci
					break
				}
			}
			if at == cj {
				break
			}
		}
	}
	return at, first
}

// ordBits is how many low bits of an ids or ops entry hold the call's
// index: every index of a history within schema.MaxHistoryEvents fits.
const (
	ordBits = 20
	ordMask = 1<<ordBits - 1
)

var _ [ordMask + 1 - schema.MaxHistoryEvents]struct{} // MaxHistoryEvents fits in ordBits

// hashSeed seeds the id and key hashes of every scan: random per process,
// so that no history is built to make them collide (collisions are
// correct, only slower).
var hashSeed = maphash.MakeSeed()

// hashString hashes an id, a task or a key (a variable for the tests,
// which make every hash collide).
var hashString = func(s string) uint64 { return maphash.String(hashSeed, s) }

func keyHash(task, key string) uint64 {
	return hashString(task)*0x9e3779b97f4a7c15 ^ hashString(key)
}

// corrupt returns a corrupt_history error naming the event's position and seq.
func (s *scan) corrupt(ev *schema.Event, format string, args ...any) error {
	return schema.Errorf(schema.CodeCorruptHistory, "event %d (seq %d): %s", s.n, ev.Seq, fmt.Sprintf(format, args...))
}

func (s *scan) tooLong(ev *schema.Event, what string, n int) error {
	return schema.Errorf(schema.CodeFieldTooLong, "event %d (seq %d): %s is %d bytes (limit %d)", s.n, ev.Seq, what, n, schema.MaxFieldBytes)
}

func (s *scan) event(ev *schema.Event) error {
	s.n++
	if s.n > schema.MaxHistoryEvents {
		return schema.Errorf(schema.CodeHistoryTooLarge, "history has more than %d events (limit)", schema.MaxHistoryEvents)
	}
	if err := ev.Validate(); err != nil {
		var se *schema.Error
		if errors.As(err, &se) {
			return &schema.Error{Code: se.Code, Message: fmt.Sprintf("event %d (seq %d): %s", s.n, ev.Seq, se.Message)}
		}
		return s.corrupt(ev, "%v", err)
	}
	if s.n == 1 {
		s.session = ev.Session
	} else if ev.Session != s.session {
		return s.corrupt(ev, "belongs to session %q, the history to session %q", ev.Session, s.session)
	}
	if ev.Seq == 0 {
		return s.corrupt(ev, "event has no seq")
	}
	if ev.Seq <= s.lastSeq {
		return s.corrupt(ev, "seq %d does not follow seq %d (physical order broken)", ev.Seq, s.lastSeq)
	}
	s.lastSeq = ev.Seq
	if ev.Epoch > schema.MaxEpoch {
		return s.corrupt(ev, "epoch %d is above the highest epoch %d (2^53-1)", ev.Epoch, uint64(schema.MaxEpoch))
	}
	if ev.Epoch < s.fence {
		return s.corrupt(ev, "epoch %d is below epoch %d of the session.fenced at seq %d: written by a fenced writer", ev.Epoch, s.fence, s.fenceAt)
	}
	switch ev.Type {
	case schema.TypeCall:
		return s.onCall(ev)
	case schema.TypeStarted:
		return s.onStarted(ev)
	case schema.TypeResult:
		return s.onResult(ev)
	case schema.TypeFenced:
		return s.onFenced(ev)
	case schema.TypeApprovalRequested, schema.TypeApprovalGranted, schema.TypeTaskStopped:
		return s.onMark(ev)
	}
	return nil // unknown types do not affect calls
}

// onFenced checks that fence epochs never go down (and stay exact in every
// JSON reader), and raises the epoch every later event must carry.
func (s *scan) onFenced(ev *schema.Event) error {
	e := ev.Fence.Epoch // Validate checked that the fence body is there
	switch {
	case e > schema.MaxEpoch:
		return s.corrupt(ev, "session.fenced has fence epoch %d, above the highest epoch %d (2^53-1)", e, uint64(schema.MaxEpoch))
	case e < s.fence:
		return s.corrupt(ev, "session.fenced has fence epoch %d, below epoch %d of the session.fenced at seq %d: fence epochs never go down", e, s.fence, s.fenceAt)
	case e > s.fence:
		s.fence, s.fenceAt = e, ev.Seq
	}
	return nil
}

func (s *scan) onCall(ev *schema.Event) error {
	c := ev.Call
	if len(c.CallID) > schema.MaxFieldBytes {
		return s.tooLong(ev, "call_id", len(c.CallID))
	}
	// a repeated id, or a repeated key without a retry link, is found by
	// dups once the history is read (or fails); from here on a failing
	// check of this event still reports a repeated id first (firstError)
	s.pendingID = c.CallID
	// The combined form (call.started, docs/protocol.md §5) records the
	// start with the call: from here on the call is started, exactly as
	// after a tool.started. Validate refused started with start_marker.
	nc := call{id: c.CallID, seq: ev.Seq, n: int32(s.n), tool: c.Tool, prior: -1, next: -1, marker: c.StartMarker, started: c.Started, combined: c.Started}
	op := c.Operation
	if op != nil {
		if at, ok := s.stopped[op.Task]; ok {
			return s.corrupt(ev, "call %q of task %q after the task.stopped at seq %d", c.CallID, op.Task, at)
		}
	}
	if op == nil {
		nc.legacy = true
	} else {
		switch {
		case len(op.Key) > schema.MaxFieldBytes:
			return s.tooLong(ev, "operation key of call "+quote(c.CallID), len(op.Key))
		case len(op.Contract.Revision) > effect.MaxRevisionBytes:
			return s.tooLong(ev, "contract revision of call "+quote(c.CallID), len(op.Contract.Revision))
		case op.Task == "" || op.Key == "":
			return s.corrupt(ev, "call %q has an operation without task or key", c.CallID)
		}
		if err := op.Contract.Validate(); err != nil {
			return s.corrupt(ev, "call %q: %v", c.CallID, err)
		}
		nc.task, nc.key, nc.effect, nc.revision = op.Task, op.Key, op.Contract.Effect, op.Contract.Revision
		if r := op.Retry; r != nil {
			if len(r.PriorCallID) > schema.MaxFieldBytes {
				return s.tooLong(ev, "retry.prior_call_id of call "+quote(c.CallID), len(r.PriorCallID))
			}
			pi, found := s.index(r.PriorCallID)
			if !found { // a call retrying itself: it is not indexed before push
				return s.corrupt(ev, "call %q retries call %q, which is not earlier in the history", c.CallID, r.PriorCallID)
			}
			p := s.at(pi)
			switch {
			case r.PriorSeq != p.seq:
				return s.corrupt(ev, "call %q retries call %q at prior_seq %d, but that call is at seq %d", c.CallID, p.id, r.PriorSeq, p.seq)
			case p.legacy:
				return s.corrupt(ev, "call %q retries call %q, which has no operation", c.CallID, p.id)
			case p.next >= 0:
				return s.corrupt(ev, "call %q retries call %q, which was already retried by call %q (chain forks)", c.CallID, p.id, s.at(p.next).id)
			case p.status == statusOK:
				return s.corrupt(ev, "call %q retries call %q, which completed (ok at seq %d): no plan is ever issued for a completed call", c.CallID, p.id, p.resSeq)
			case p.tool != nc.tool:
				return s.corrupt(ev, "call %q retries call %q with tool %q instead of %q", c.CallID, p.id, nc.tool, p.tool)
			case p.task != nc.task:
				return s.corrupt(ev, "call %q retries call %q in task %q instead of %q", c.CallID, p.id, nc.task, p.task)
			case p.key != nc.key:
				return s.corrupt(ev, "call %q retries call %q with operation key %q instead of %q", c.CallID, p.id, nc.key, p.key)
			case p.effect != nc.effect || p.revision != nc.revision:
				return s.corrupt(ev, "call %q retries call %q under contract %s instead of %s", c.CallID, p.id, op.Contract, p.contract())
			}
			nc.prior = pi
			p.next = s.count
			if s.links != nil {
				l := *r
				if r.Review != nil {
					rv := *r.Review // the source may reuse its events
					l.Review = &rv
				}
				s.links[s.count] = l
			}
			if bytes.Equal(p.args, c.Arguments) {
				nc.args = p.args // the same bytes: the same canonical arguments
			} else {
				nc.args = s.copyArgs(c.Arguments) // the source may reuse its buffer
				s.pairs = append(s.pairs, argPair{idx: s.count, prior: p.args, args: nc.args})
			}
		} else {
			s.ops = append(s.ops, keyHash(op.Task, op.Key)&^ordMask|uint64(s.count))
		}
	}
	if !nc.legacy && nc.args == nil {
		nc.args = s.copyArgs(c.Arguments) // the source may reuse its buffer
	}
	s.push(nc)
	return nil
}

// copyArgs returns a copy of a call's arguments. Small ones (at most
// smallArgs bytes, most calls') are copied into blocks of argsBlock bytes
// shared by many calls instead of one allocation each; a block lives as
// long as the scan (a completed call's copy is not freed early, at most
// smallArgs bytes per call). Larger ones get their own copy, freed when
// the call no longer needs it.
func (s *scan) copyArgs(b []byte) []byte {
	if len(b) > smallArgs {
		return bytes.Clone(b)
	}
	if len(b) > cap(s.argBlock)-len(s.argBlock) {
		s.argBlock = make([]byte, 0, argsBlock)
	}
	k := len(s.argBlock)
	s.argBlock = append(s.argBlock, b...)
	return s.argBlock[k:len(s.argBlock):len(s.argBlock)]
}

const (
	smallArgs = 256
	argsBlock = 16 << 10
)

// callChunk is how many calls one chunk holds: chunks never move once
// allocated, so the calls are not copied as a history grows.
const callChunk = 1024

func (s *scan) at(i int32) *call { return &s.chunks[i/callChunk][i%callChunk] }

// recentCalls is how many of the latest calls index compares before it
// turns to the map: a started or result event mostly follows its call
// closely.
const recentCalls = 8

// index returns the index of the call with id (the latest one, should
// there be a repeat dups has yet to report).
func (s *scan) index(id string) (int32, bool) {
	for i, end := s.count-1, max(s.count-recentCalls, 0); i >= end; i-- {
		if s.at(i).id == id {
			return i, true
		}
	}
	if s.mapped < s.count {
		if s.byID == nil {
			s.byID = make(map[string]int32)
		}
		for ; s.mapped < s.count; s.mapped++ {
			s.byID[s.at(s.mapped).id] = s.mapped
		}
	}
	i, ok := s.byID[id]
	return i, ok
}

// push appends c. The first chunk starts small and grows by append up
// to callChunk (most histories a prepare or a status reads hold a few
// calls, and a whole chunk is ~190 KB: a fifth of a prepare's CPU went
// to allocating and clearing it); later chunks are made whole. Growing
// the first chunk moves its calls, so no *call is kept across a push
// (every handler takes its pointers from at and drops them before it
// returns; onCall pushes last).
func (s *scan) push(c call) {
	s.ids = append(s.ids, hashString(c.id)&^ordMask|uint64(s.count))
	if c.id == s.target {
		s.tgt = s.count
	}
	s.pendingID = ""
	if s.count%callChunk == 0 {
		size := callChunk
		if s.count == 0 {
			size = firstChunk
		}
		s.chunks = append(s.chunks, make([]call, 0, size))
	}
	k := len(s.chunks) - 1
	s.chunks[k] = append(s.chunks[k], c)
	s.count++
}

// firstChunk is the first chunk's starting capacity.
const firstChunk = 8

// lookup returns the call an event refers to, checking that it exists and
// has not been retried yet.
func (s *scan) lookup(ev *schema.Event, id, what string) (*call, error) {
	if len(id) > schema.MaxFieldBytes {
		return nil, s.tooLong(ev, what+" call_id", len(id))
	}
	i, ok := s.index(id)
	if !ok {
		return nil, s.corrupt(ev, "%s for call %q without a prior tool.call", what, id)
	}
	c := s.at(i)
	if c.next >= 0 {
		return nil, s.corrupt(ev, "%s for call %q after its retry %q (seq %d)", what, id, s.at(c.next).id, s.at(c.next).seq)
	}
	return c, nil
}

func (s *scan) onStarted(ev *schema.Event) error {
	c, err := s.lookup(ev, ev.Started.CallID, "tool.started")
	if err != nil {
		return err
	}
	if c.combined {
		return s.corrupt(ev, "tool.started for call %q, whose tool.call (seq %d) already recorded it started (started: true): tool.started twice", c.id, c.seq)
	}
	if c.started {
		return s.corrupt(ev, "second tool.started for call %q", c.id)
	}
	if c.resSeq != 0 {
		return s.corrupt(ev, "tool.started for call %q after its result (seq %d)", c.id, c.resSeq)
	}
	if c.asked && !c.granted {
		return s.corrupt(ev, "tool.started for call %q, which waits for approval (no approval.granted)", c.id)
	}
	c.started = true
	return nil
}

func (s *scan) onResult(ev *schema.Event) error {
	r := ev.Result
	c, err := s.lookup(ev, r.CallID, "tool.result")
	if err != nil {
		return err
	}
	if c.resSeq != 0 {
		return s.corrupt(ev, "second tool.result for call %q (first at seq %d)", c.id, c.resSeq)
	}
	if r.Status == schema.StatusRejected {
		if !r.Stage.Valid() {
			return s.corrupt(ev, "call %q rejected without a valid stage (%q)", c.id, r.Stage)
		}
		if c.combined {
			return s.corrupt(ev, "call %q rejected at stage %s, but its tool.call recorded it admitted and started (started: true)", c.id, r.Stage)
		}
		if c.started {
			return s.corrupt(ev, "call %q rejected at stage %s after its tool.started", c.id, r.Stage)
		}
	} else if r.Stage != "" {
		return s.corrupt(ev, "call %q has stage %q with status %s (stage only goes with rejected)", c.id, r.Stage, r.Status)
	} else if c.asked && !c.granted {
		return s.corrupt(ev, "call %q ends %s while it waits for approval (only rejected may end it before approval.granted)", c.id, r.Status)
	}
	st, sg := codeOf(statuses[1:], r.Status), codeOf(stages, r.Stage)
	if st < 0 || sg < 0 { // Validate refused them: not reached
		return s.corrupt(ev, "call %q has status %q and stage %q", c.id, r.Status, r.Stage)
	}
	c.status, c.stage, c.resSeq = uint8(st+1), uint8(sg), ev.Seq
	if c.status == statusOK && c.id != s.target {
		c.args = nil // a retry of a completed call is corrupt: nothing compares them
	}
	return nil
}

// assess classifies the target call (docs/protocol.md §9).
func (s *scan) assess() schema.Assessment {
	c := s.at(s.idx)
	n := 0
	for i := s.idx; i >= 0; i = s.at(i).prior {
		n++
	}
	chain := make([]string, n)
	for i, k := s.idx, n-1; i >= 0; i, k = s.at(i).prior, k-1 {
		chain[k] = s.at(i).id
	}
	a := schema.Assessment{
		Session:  s.session,
		CallID:   c.id,
		Tool:     c.tool,
		Task:     c.task,
		Key:      c.key,
		Contract: c.contract(),
		Attempts: n,
		Chain:    chain,
	}
	a.Outcome, a.Evidence, a.Decision = Classify(statuses[c.status], stages[c.stage], c.marker, c.started, c.contract())
	return a
}

// Classify is the decision table of docs/protocol.md §9 for one call's latest
// attempt, from what its history says about it: the result's status (""
// for none) and stage, whether the call follows the start-marker protocol,
// whether tool.started was recorded, and the call's contract. It returns
// the outcome, the evidence it rests on (a status, "rejected:<stage>",
// EvidenceNoResult or EvidenceNotStartedMarker) and the decision. A call
// in the combined form (call.started) is passed as marker false, started
// true: without a result it is uncertain, no_result, like a marker call
// with a tool.started. Reviews
// are not part of it: PrepareRetry applies them. Inspect uses it after
// verifying the history; an incremental classifier that tracks the same
// facts gets the same answer from it.
func Classify(status schema.Status, stage schema.Stage, marker, started bool, c effect.Contract) (schema.Outcome, string, schema.Decision) {
	var out schema.Outcome
	var ev string
	switch {
	case status == schema.StatusOK:
		out, ev = schema.OutcomeCompleted, string(status)
	case status == schema.StatusRejected: // the stage is checked when the result is read
		out, ev = schema.OutcomeNotStarted, string(status)+":"+string(stage)
	case status != "":
		out, ev = schema.OutcomeUncertain, string(status)
	case marker && !started:
		out, ev = schema.OutcomeNotStarted, EvidenceNotStartedMarker
	default:
		out, ev = schema.OutcomeUncertain, EvidenceNoResult
	}
	switch {
	case out == schema.OutcomeCompleted:
		return out, ev, schema.DecisionRefuse
	case out == schema.OutcomeNotStarted, c.Effect.Safe():
		return out, ev, schema.DecisionRetryAllowed
	}
	return out, ev, schema.DecisionNeedsReview
}

// Evidence values that are not a result status (see schema.Assessment).
const (
	// EvidenceNoResult: the call has no result, and either the runtime does
	// not follow the start-marker protocol or the body was started (a
	// tool.started, or a tool.call in the combined form).
	EvidenceNoResult = "no_result"
	// EvidenceNotStartedMarker: the call follows the start-marker protocol,
	// has no tool.started and no result, so its body never ran.
	EvidenceNotStartedMarker = "not_started_marker"
)

func quote(s string) string { return fmt.Sprintf("%q", s) }

// WriterMayRun reports whether a call assessed with this evidence may still
// have its body running somewhere: it has no result of its own (no_result:
// its writer was fenced or crashed), or the runtime recorded a timeout or a
// cancellation while the body, which may ignore its context, went on. A
// reviewer of such a call fences the business store (or confirms the old
// process is gone) before checking it and signing not_executed.
func WriterMayRun(evidence string) bool {
	switch evidence {
	case EvidenceNoResult, string(schema.StatusTimeout), string(schema.StatusCancelled):
		return true
	}
	return false
}
