package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/fence"
)

// The example tools' probes (package worker/prober): read-only tools that
// find out whether an uncertain call of payments.charge or orders.create
// took effect. Their contracts name them (effect.Metadata.Probe).
const (
	PaymentsLookup = "payments.lookup"
	OrdersLookup   = "orders.lookup"

	PaymentsLookupRevision = "payments-lookup-v1"
	OrdersLookupRevision   = "orders-lookup-v1"
)

// probeResult is a probe's output: worker/prober's Result.
type probeResult struct {
	Answer   string `json:"answer"`
	Evidence string `json:"evidence"`
}

// Probes returns the example tools' probes, for a prober's registry (next
// to List). They are not among List's tools: agents do not call them.
func (t *Tools) Probes() []worker.Tool {
	return []worker.Tool{t.PaymentsLookupTool(), t.OrdersLookupTool()}
}

// PaymentsLookupTool returns payments.lookup, the probe of payments.charge:
// it raises the ledger's fence for the call's session to the epoch in the
// request's fencing token (the epoch the session was fenced at after the
// call) and only then looks for a charge of the call id on the session's
// ledger subject. Its not_found is authoritative: after the raise, the
// call's writer (an older epoch) can no longer charge. A request without an
// epoch raises nothing: it answers found or unknown, never not_found.
func (t *Tools) PaymentsLookupTool() worker.Tool {
	return worker.Tool{
		Metadata: effect.Metadata{
			Name:                  PaymentsLookup,
			Description:           "Probe of payments.charge: raise the ledger fence to the session's epoch, then look the charge up by call id.",
			AuthoritativeNotFound: true,
		}.WithEffect(effect.ReadOnly, PaymentsLookupRevision),
		Timeout: 5 * time.Second,
		Body:    t.lookupCharge,
	}
}

func (t *Tools) lookupCharge(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
	// Without an epoch (the session is not fenced after the call) nothing
	// is raised: a charge found is still found, its absence proves nothing.
	unfenced := req.Fence.Epoch == 0
	if !unfenced {
		err := t.FenceLedger(ctx, req.Session, req.Fence.Epoch)
		if errors.Is(err, ErrUnfenced) {
			unfenced = true
		} else if err != nil {
			return nil, fmt.Errorf("payments.lookup: raise fence: %w", err)
		}
	}
	// Read with message gets (what the tool workers' role may do), the
	// session's subject only.
	subj := t.LedgerSubject(req.Session)
	info, err := t.ledger.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("payments.lookup: read ledger: %w", err)
	}
	n := 0
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := t.ledger.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("payments.lookup: read ledger: %w", err)
		}
		if m.Subject != subj || m.Header.Get(fence.HeaderMarker) != "" {
			continue
		}
		n++
		var c Charge
		if json.Unmarshal(m.Data, &c) != nil || c.CallID != req.CallID {
			continue
		}
		return json.Marshal(probeResult{Answer: "found", Evidence: fmt.Sprintf("ledger %s seq %d: %d cents charged to %s by call %s at epoch %d", subj, seq, c.AmountCents, c.Account, c.CallID, c.Epoch)})
	}
	if unfenced {
		return json.Marshal(probeResult{Answer: "unknown", Evidence: fmt.Sprintf("no charge of call %s on %s yet, but its fence was not raised: a late charge could still land", req.CallID, subj)})
	}
	return json.Marshal(probeResult{Answer: "not_found", Evidence: fmt.Sprintf("ledger fence of %s raised to epoch %d; no charge of call %s among its %d charges", subj, req.Fence.Epoch, req.CallID, n)})
}

// OrdersLookupTool returns orders.lookup, the probe of orders.create: it
// raises the fence of the order the call's task and key would create to
// the request's epoch and reads the order. Its not_found is authoritative:
// the order id is derived from the operation key (the backend deduplicates
// on it) and the raise refuses the old writer's late create.
func (t *Tools) OrdersLookupTool() worker.Tool {
	return worker.Tool{
		Metadata: effect.Metadata{
			Name:                  OrdersLookup,
			Description:           "Probe of orders.create: the order by task and operation key.",
			AuthoritativeNotFound: true,
		}.WithEffect(effect.ReadOnly, OrdersLookupRevision),
		Timeout: 5 * time.Second,
		Body:    t.lookupOrder,
	}
}

func (t *Tools) lookupOrder(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
	if req.Fence.Epoch == 0 {
		return json.Marshal(probeResult{Answer: "unknown", Evidence: "no fence epoch to raise the order's fence to"})
	}
	id := "ord-" + hash(req.Operation.Task, req.Operation.Key)[:24]
	if _, err := t.orderFence.Raise(ctx, fence.KeySubject(t.cfg.Prefix+"_orders", id), req.Session, req.Fence.Epoch); err != nil {
		return nil, fmt.Errorf("orders.lookup: raise fence: %w", err)
	}
	e, err := t.orders.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		return json.Marshal(probeResult{Answer: "not_found", Evidence: fmt.Sprintf("order %s (task %s, key %s) fenced at epoch %d and absent", id, req.Operation.Task, req.Operation.Key, req.Fence.Epoch)})
	case err != nil:
		return nil, fmt.Errorf("orders.lookup: %w", err)
	}
	return json.Marshal(probeResult{Answer: "found", Evidence: fmt.Sprintf("order %s (task %s, key %s) revision %d", id, req.Operation.Task, req.Operation.Key, e.Revision())})
}
