package recovery

import (
	"slices"

	"github.com/jingwei/jingwei/schema"
)

// OpenCalls is the "open call" rule, written once: a call is open from its
// tool.call until its tool.result, or until a session.fenced of a newer
// epoch than the call's closes it (the fenced writer can never append its
// result: its assessment is final). Each open call carries a value V of
// the caller's (the classifier keeps what it needs to assess the call;
// OpenIn keeps nothing). The zero value is ready to use; not safe for
// concurrent use.
type OpenCalls[V any] struct {
	calls map[string]openEntry[V]
	n     uint64 // calls opened, for the order of IDs
}

type openEntry[V any] struct {
	epoch uint64
	n     uint64
	v     V
	// parked: the call waits for approval (approval.requested, no
	// approval.granted yet). A pending-answer boundary belongs to no
	// writer: a fence does not close it, and whichever owner records its
	// answer adopts it at its own epoch.
	parked bool
}

// Open records the tool.call callID, written at epoch, with its value. A
// call id opened again replaces the first (a corrupt log; Inspect refuses
// it) and keeps one entry.
func (o *OpenCalls[V]) Open(callID string, epoch uint64, v V) {
	if o.calls == nil {
		o.calls = make(map[string]openEntry[V])
	}
	o.n++
	o.calls[callID] = openEntry[V]{epoch: epoch, n: o.n, v: v}
}

// Get returns the value of an open call.
func (o *OpenCalls[V]) Get(callID string) (V, bool) {
	e, ok := o.calls[callID]
	return e.v, ok
}

// Close removes the call its tool.result closed and returns its value (ok
// false if it was not open).
func (o *OpenCalls[V]) Close(callID string) (V, bool) {
	e, ok := o.calls[callID]
	if ok {
		delete(o.calls, callID)
	}
	return e.v, ok
}

// Fence applies a session.fenced at epoch: every open call of an older
// epoch is closed, and passed to closed (when not nil), in the order the
// calls were opened.
func (o *OpenCalls[V]) Fence(epoch uint64, closed func(callID string, v V)) {
	var ids []string
	for id, e := range o.calls {
		if e.epoch < epoch && !e.parked {
			ids = append(ids, id)
		}
	}
	o.sortByOpening(ids)
	for _, id := range ids {
		e := o.calls[id]
		delete(o.calls, id)
		if closed != nil {
			closed(id, e.v)
		}
	}
}

// Observe applies one event of the log: a tool.call opens (with value v()),
// a tool.result closes, a session.fenced fences (closed as for Fence).
// Other events change nothing.
func (o *OpenCalls[V]) Observe(ev schema.Event, v func() V, closed func(callID string, v V)) {
	switch {
	case ev.Type == schema.TypeCall && ev.Call != nil:
		var val V
		if v != nil {
			val = v()
		}
		o.Open(ev.Call.CallID, ev.Epoch, val)
	case ev.Type == schema.TypeResult && ev.Result != nil:
		o.Close(ev.Result.CallID)
	case ev.Type == schema.TypeFenced && ev.Fence != nil:
		o.Fence(ev.Fence.Epoch, closed)
	case ev.Type == schema.TypeApprovalRequested && ev.ApprovalRequest != nil:
		o.park(ev.ApprovalRequest.CallID, 0, true)
	case ev.Type == schema.TypeApprovalGranted && ev.Approval != nil:
		o.park(ev.Approval.CallID, ev.Epoch, false)
	}
}

// park marks an open call as waiting for approval (a fence does not close
// it), or, with parked false, as approved at epoch: from then on it is the
// call of the writer of that epoch, which a newer fence closes.
func (o *OpenCalls[V]) park(callID string, epoch uint64, parked bool) {
	e, ok := o.calls[callID]
	if !ok {
		return
	}
	e.parked = parked
	if !parked {
		e.epoch = epoch
	}
	o.calls[callID] = e
}

// Parked reports whether an open call waits for approval.
func (o *OpenCalls[V]) Parked(callID string) bool { return o.calls[callID].parked }

// Len returns how many calls are open.
func (o *OpenCalls[V]) Len() int { return len(o.calls) }

// IDs returns the open calls' ids in the order they were opened.
func (o *OpenCalls[V]) IDs() []string {
	ids := make([]string, 0, len(o.calls))
	for id := range o.calls {
		ids = append(ids, id)
	}
	o.sortByOpening(ids)
	return ids
}

// Each calls f for every open call (in no particular order).
func (o *OpenCalls[V]) Each(f func(callID string, v V)) {
	for id, e := range o.calls {
		f(id, e.v)
	}
}

func (o *OpenCalls[V]) sortByOpening(ids []string) {
	slices.SortFunc(ids, func(a, b string) int {
		na, nb := o.calls[a].n, o.calls[b].n
		switch {
		case na < nb:
			return -1
		case na > nb:
			return 1
		}
		return 0
	})
}

// OpenIn returns the calls of a loaded history that are open at its end
// (or, with before > 0, just before the event at sequence before), in the
// order they were opened: the calls a running writer may still finish;
// the rest are confirmed.
func OpenIn(h []schema.Event, before uint64) []string {
	var o OpenCalls[struct{}]
	for _, ev := range h {
		if before > 0 && ev.Seq >= before {
			break
		}
		o.Observe(ev, nil, nil)
	}
	return o.IDs()
}

// IsOpen reports whether callID is among the calls open at the end of h.
func IsOpen(h []schema.Event, callID string) bool {
	return slices.Contains(OpenIn(h, 0), callID)
}
