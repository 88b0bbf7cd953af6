package recoverer

import "github.com/jingwei/jingwei/schema"

// openIn returns the calls of a loaded history that are open at its end
// (or, with before > 0, just before the event at sequence before): calls
// without a result that no session.fenced of a newer epoch has closed. These
// are the calls a running writer may still finish; the rest are confirmed.
func openIn(h []schema.Event, before uint64) []string {
	type st struct {
		epoch uint64
		idx   int
	}
	open := map[string]st{}
	var order []string
	for _, ev := range h {
		if before > 0 && ev.Seq >= before {
			break
		}
		switch {
		case ev.Call != nil && ev.Type == schema.TypeCall:
			open[ev.Call.CallID] = st{ev.Epoch, len(order)}
			order = append(order, ev.Call.CallID)
		case ev.Result != nil && ev.Type == schema.TypeResult:
			delete(open, ev.Result.CallID)
		case ev.Fence != nil && ev.Type == schema.TypeFenced:
			for id, s := range open {
				if s.epoch < ev.Fence.Epoch {
					delete(open, id)
				}
			}
		}
	}
	out := make([]string, 0, len(open))
	for _, id := range order {
		if _, ok := open[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

// isOpen reports whether callID is among the open calls of h.
func isOpen(h []schema.Event, callID string) bool {
	for _, id := range openIn(h, 0) {
		if id == callID {
			return true
		}
	}
	return false
}
