// Package ledger is what an operator does with the example tools' ledger
// (TOOLS_LEDGER, where payments.charge writes) before signing a review:
// raise its fence for a session (jingwei fence), so that a frozen writer
// can no longer charge, and list its charges (jingwei ledger).
package ledger

import (
	"context"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/tools"
)

// Open opens the example tools' stores on nc, a connection with the worker
// role (the ledger is the tool workers' store).
func Open(ctx context.Context, nc *nats.Conn) (*tools.Tools, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return tools.New(ctx, tools.Config{JS: js})
}

// Fence is a raised fence, what jingwei fence prints with --json.
type Fence struct {
	Session string `json:"session"`
	Subject string `json:"subject"`
	Epoch   uint64 `json:"epoch"`
}

// RaiseFence raises the fence of the session's ledger subject to epoch (an
// epoch at or below the current fence changes nothing) and says where.
func RaiseFence(ctx context.Context, tl *tools.Tools, session string, epoch uint64) (Fence, error) {
	if err := tl.FenceLedger(ctx, session, epoch); err != nil {
		return Fence{}, err
	}
	return Fence{Session: session, Subject: tl.LedgerSubject(session), Epoch: epoch}, nil
}

// String says what the raised fence means.
func (f Fence) String() string {
	return fmt.Sprintf("fence of %s raised to epoch %d: a writer of session %s below epoch %d can no longer charge", f.Subject, f.Epoch, f.Session, f.Epoch)
}

// LatestEpoch returns the highest epoch of a history: its last
// session.fenced's, or its writers'; 0 for an empty one.
func LatestEpoch(h []schema.Event) uint64 {
	var e uint64
	for i := range h {
		e = max(e, h[i].Epoch)
		if h[i].Fence != nil {
			e = max(e, h[i].Fence.Epoch)
		}
	}
	return e
}

// Charges returns the charges of all that are of session and of call (""
// matches any), in their order; never nil.
func Charges(all []tools.Charge, session, call string) []tools.Charge {
	out := []tools.Charge{}
	for _, c := range all {
		if (session == "" || c.Session == session) && (call == "" || c.CallID == call) {
			out = append(out, c)
		}
	}
	return out
}

// WriteCharges writes one line per charge, or "no charges".
func WriteCharges(w io.Writer, charges []tools.Charge) {
	if len(charges) == 0 {
		fmt.Fprintln(w, "no charges")
	}
	for _, c := range charges {
		fmt.Fprintf(w, "TOOLS_LEDGER seq %d: %d cents to %s by call %s (session %s, epoch %d)\n", c.Seq, c.AmountCents, c.Account, c.CallID, c.Session, c.Epoch)
	}
}
