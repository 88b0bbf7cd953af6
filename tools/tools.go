// Package tools holds jingwei's example tools, one per contract: the
// idempotent orders.create (orders-v1), the non-idempotent payments.charge
// (payments-v1) and the read-only catalog.lookup (catalog-v1). Tests, the
// demo and the tool workers register them with a worker.Registry.
//
// orders.create shows what keeping the idempotent promise takes: a durable
// dedupe record keyed by task + operation key (in a JetStream KV bucket)
// that holds the argument digest, a refusal of the same key with other
// arguments, and a business record written exactly once (a KV create under an
// order id derived from the key), so a retry after an uncertain failure
// finds the order instead of placing a second one.
//
// Both tools fence their side effect with the call's fencing token
// (worker.Fence, package worker/fence): payments.charge appends its ledger
// entry on <prefix>.ledger.<session> only if no newer writer of the
// session wrote there, and orders.create creates its order only if no newer
// writer touched the order's key. A tool worker frozen (SIGSTOP) in the
// middle of a call, whose session was then taken over, resumes to find its
// late write refused. A reviewer about to sign not_executed for a fenced
// payment raises the ledger's fence first (Tools.FenceLedger, at the
// fence's epoch) and only then checks the ledger: no entry then stays true.
package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/fence"
)

// Tool names and contract revisions.
const (
	OrdersCreate   = "orders.create"
	PaymentsCharge = "payments.charge"
	CatalogLookup  = "catalog.lookup"

	OrdersRevision   = "orders-v1"
	PaymentsRevision = "payments-v1"
	CatalogRevision  = "catalog-v1"
)

// Config configures the example tools.
type Config struct {
	// JS is where the tools keep their state. Required.
	JS jetstream.JetStream
	// Prefix is the stem of the tools' buckets and stream: <prefix>_orders,
	// <prefix>_order_keys and stream <PREFIX>_LEDGER on <prefix>.ledger and
	// <prefix>.ledger.> (charges go to <prefix>.ledger.<session>).
	// Defaults to "tools".
	Prefix string
	// Replicas of the buckets and stream. Defaults to 1.
	Replicas int
	// Logger defaults to a disabled logger.
	Logger zerolog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "tools"
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	return c
}

// Tools is the set of example tools on one NATS connection. Safe for
// concurrent use.
type Tools struct {
	cfg       Config
	orders    jetstream.KeyValue // order id → Order (the business record)
	keys      jetstream.KeyValue // task.key → dedupe record
	ledger    jetstream.Stream
	ledgerSub string

	// fenced writes: the ledger per session, the orders per order id.
	ledgerFence *fence.Store // nil: the ledger stream predates fencing (no <prefix>.ledger.>)
	orderFence  *fence.Store

	failAfterWrite atomic.Int64
}

// New creates the tools' buckets and stream where missing (idempotently: an
// existing one with the same configuration is reused, one with another is
// left alone and used as it is) and returns the tools.
func New(ctx context.Context, cfg Config) (*Tools, error) {
	cfg = cfg.WithDefaults()
	if cfg.JS == nil {
		return nil, fmt.Errorf("%w: JS is required", ErrInvalidConfig)
	}
	t := &Tools{cfg: cfg, ledgerSub: cfg.Prefix + ".ledger"}
	var err error
	if t.orders, err = ensureKV(ctx, cfg.JS, jetstream.KeyValueConfig{Bucket: cfg.Prefix + "_orders", Replicas: cfg.Replicas}); err != nil {
		return nil, err
	}
	if t.keys, err = ensureKV(ctx, cfg.JS, jetstream.KeyValueConfig{Bucket: cfg.Prefix + "_order_keys", Replicas: cfg.Replicas}); err != nil {
		return nil, err
	}
	scfg := jetstream.StreamConfig{
		Name: strings.ToUpper(cfg.Prefix) + "_LEDGER", Subjects: []string{t.ledgerSub, t.ledgerSub + ".>"},
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	}
	t.ledger, err = cfg.JS.CreateStream(ctx, scfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		t.ledger, err = cfg.JS.Stream(ctx, scfg.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("tools: ledger stream %s: %w", scfg.Name, err)
	}
	if slices.Contains(t.ledger.CachedInfo().Config.Subjects, t.ledgerSub+".>") {
		if t.ledgerFence, err = fence.New(ctx, fence.Config{JS: cfg.JS, Stream: scfg.Name}); err != nil {
			return nil, fmt.Errorf("tools: %w", err)
		}
	} else {
		cfg.Logger.Warn().Str("stream", scfg.Name).Msg("the ledger stream predates fencing (no " + t.ledgerSub + ".> subject): payments.charge writes unfenced on " + t.ledgerSub)
	}
	if t.orderFence, err = fence.ForKV(ctx, cfg.JS, cfg.Prefix+"_orders"); err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	return t, nil
}

// LedgerSubject is the subject payments.charge appends the charges of
// session to, and whose fence FenceLedger raises.
func (t *Tools) LedgerSubject(session string) string { return t.ledgerSub + "." + session }

// FenceLedger raises the ledger's fence for session to epoch: every later
// charge of a writer of that session below epoch is refused. A reviewer
// who is about to sign not_executed for a payment whose writer was fenced
// at epoch E (the session.fenced event's epoch) calls it with E first and
// then checks the ledger: a frozen writer's late charge can no longer land
// after the check. Raising an epoch at or below the current fence does
// nothing. On a ledger stream that predates fencing it fails with
// ErrUnfenced.
func (t *Tools) FenceLedger(ctx context.Context, session string, epoch uint64) error {
	if t.ledgerFence == nil {
		return ErrUnfenced
	}
	_, err := t.ledgerFence.Raise(ctx, t.LedgerSubject(session), session, epoch)
	return err
}

func ensureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("tools: bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// List returns the three tools, ready for worker.NewRegistry.
func (t *Tools) List() []worker.Tool {
	return []worker.Tool{t.OrdersCreateTool(), t.PaymentsChargeTool(), t.CatalogLookupTool()}
}

// Register adds the three tools to reg.
func (t *Tools) Register(reg *worker.Registry) error {
	for _, tl := range t.List() {
		if err := reg.Register(tl); err != nil {
			return err
		}
	}
	return nil
}

// FailAfterWrite is a test knob for the reference scenario: the next n
// orders.create runs write their order and then fail (retryable), as if the
// process had lost its answer. The order stays written; the dedupe record
// stays pending, so a retry with the same key finds the order.
func (t *Tools) FailAfterWrite(n int) { t.failAfterWrite.Store(int64(n)) }

func (t *Tools) takeFailure() bool {
	for {
		n := t.failAfterWrite.Load()
		if n <= 0 {
			return false
		}
		if t.failAfterWrite.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// ---- orders.create ----------------------------------------------------

// OrderArgs are the arguments of orders.create.
type OrderArgs struct {
	SKU      string `json:"sku"`
	Qty      int    `json:"qty"`
	Customer string `json:"customer,omitempty"`
}

// Order is the business record orders.create writes once per task + key.
type Order struct {
	OrderID   string    `json:"order_id"`
	Task      string    `json:"task"`
	Key       string    `json:"key"`
	SKU       string    `json:"sku"`
	Qty       int       `json:"qty"`
	Customer  string    `json:"customer,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// orderKey is the dedupe record under task.key.
type orderKey struct {
	ArgsDigest string          `json:"args_digest"`
	OrderID    string          `json:"order_id"`
	State      string          `json:"state"` // "pending" until the answer is known, then "done"
	Output     json.RawMessage `json:"output,omitempty"`
}

const ordersSchema = `{
  "type": "object",
  "properties": {
    "sku": {"type": "string", "minLength": 1, "maxLength": 64},
    "qty": {"type": "integer", "minimum": 1, "maximum": 1000},
    "customer": {"type": "string", "maxLength": 128}
  },
  "required": ["sku", "qty"],
  "additionalProperties": false
}`

// OrdersCreateTool returns orders.create: idempotent at revision orders-v1.
func (t *Tools) OrdersCreateTool() worker.Tool {
	return worker.Tool{
		Metadata: effect.Metadata{
			Name:        OrdersCreate,
			Description: "Place an order for qty of sku; deduplicated on task + operation key.",
			Probe:       OrdersLookup,
		}.WithEffect(effect.Idempotent, OrdersRevision),
		InputSchema:    json.RawMessage(ordersSchema),
		CheckArguments: decodes[OrderArgs],
		Timeout:        10 * time.Second,
		Body:           t.createOrder,
	}
}

func (t *Tools) createOrder(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
	var a OrderArgs
	if err := json.Unmarshal(req.Arguments, &a); err != nil {
		return nil, fmt.Errorf("orders.create: %w", err)
	}
	digest, err := schema.ArgsDigest(req.Arguments)
	if err != nil {
		return nil, fmt.Errorf("orders.create: %w", err)
	}
	dk := dedupeKey(req.Operation.Task, req.Operation.Key)
	rec := orderKey{ArgsDigest: digest, OrderID: "ord-" + hash(req.Operation.Task, req.Operation.Key)[:24], State: "pending"}

	// 1. The dedupe record comes first: it claims the key for these
	// arguments before anything is written.
	var rev uint64
	for {
		b, _ := json.Marshal(rec)
		rev, err = retrying(ctx, func(ctx context.Context) (uint64, error) { return t.keys.Create(ctx, dk, b) })
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, worker.Retryable(fmt.Errorf("orders.create: dedupe record: %w", err))
		}
		e, gerr := retrying(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return t.keys.Get(ctx, dk) })
		if errors.Is(gerr, jetstream.ErrKeyNotFound) {
			continue
		}
		if gerr != nil {
			return nil, worker.Retryable(fmt.Errorf("orders.create: dedupe record: %w", gerr))
		}
		var have orderKey
		if err := json.Unmarshal(e.Value(), &have); err != nil {
			return nil, fmt.Errorf("orders.create: dedupe record %s: %w", dk, err)
		}
		if have.ArgsDigest != digest {
			return nil, fmt.Errorf("%w: task %s key %s was used for %s, this call has %s", ErrKeyReused, req.Operation.Task, req.Operation.Key, have.ArgsDigest, digest)
		}
		if have.State == "done" {
			t.cfg.Logger.Info().Str("op_key", req.Operation.Key).Str("order_id", have.OrderID).Msg("orders.create deduplicated")
			return have.Output, nil
		}
		rec, rev = have, e.Revision() // a previous attempt got as far as pending: finish its work
		break
	}

	// 2. The business record, exactly once: a create under the order id
	// derived from the key; finding it means an earlier attempt wrote it.
	// The create is fenced: a writer fenced while it ran (the order's key
	// touched by a newer writer of the session) is refused.
	order := Order{OrderID: rec.OrderID, Task: req.Operation.Task, Key: req.Operation.Key, SKU: a.SKU, Qty: a.Qty, Customer: a.Customer, CreatedAt: time.Now().UTC()}
	ob, _ := json.Marshal(order)
	_, err = t.orderFence.Create(ctx, fence.KeySubject(t.cfg.Prefix+"_orders", rec.OrderID), fenceOf(req), ob)
	switch {
	case errors.Is(err, fence.ErrStale):
		return nil, fmt.Errorf("orders.create: %w", err)
	case err != nil && !errors.Is(err, fence.ErrExists):
		return nil, worker.Retryable(fmt.Errorf("orders.create: write order: %w", err))
	}
	if t.takeFailure() {
		return nil, worker.Retryable(ErrSimulatedFailure)
	}

	// 3. The answer, kept with the key so a later attempt returns it.
	out, _ := json.Marshal(map[string]any{"order_id": rec.OrderID, "sku": a.SKU, "qty": a.Qty})
	rec.State, rec.Output = "done", out
	b, _ := json.Marshal(rec)
	if _, err := retrying(ctx, func(ctx context.Context) (uint64, error) { return t.keys.Update(ctx, dk, b, rev) }); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// The order exists; only the cached answer is missing, which the
		// next attempt rebuilds.
		return nil, worker.Retryable(fmt.Errorf("orders.create: finish dedupe record: %w", err))
	}
	return out, nil
}

// Orders returns every order record, for tests and the demo.
func (t *Tools) Orders(ctx context.Context) ([]Order, error) {
	keys, err := t.orders.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []Order
	for k := range keys.Keys() {
		e, err := t.orders.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		var o Order
		if err := json.Unmarshal(e.Value(), &o); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// decodes is a worker.Tool CheckArguments: the arguments must decode into
// the body's argument type, so a value the schema allows but the body
// cannot hold (amount_cents 2^63, 1e400 or 100.0 for an int64) is rejected
// at the arguments stage instead of failing the body.
func decodes[T any](args json.RawMessage) error {
	var v T
	if err := json.Unmarshal(args, &v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s: %s cannot be represented as %s", te.Field, te.Value, te.Type)
		}
		return err
	}
	return nil
}

func dedupeKey(task, key string) string {
	if schema.ValidSession(task) && schema.ValidSession(key) {
		return task + "." + key
	}
	return "h." + hash(task, key)
}

func hash(task, key string) string {
	s := sha256.Sum256([]byte(task + "\x00" + key))
	return hex.EncodeToString(s[:])
}

// fenceOf is the call's fencing token: the one the runtime put in req, or
// (a body called directly, as tests do) the session alone at epoch 0.
func fenceOf(req worker.BodyRequest) worker.Fence {
	if req.Fence.Session != "" {
		return req.Fence
	}
	return worker.Fence{Session: req.Session, CallID: req.CallID, Task: req.Operation.Task, Key: req.Operation.Key}
}

// ---- payments.charge --------------------------------------------------

// ChargeArgs are the arguments of payments.charge.
type ChargeArgs struct {
	Account     string `json:"account"`
	AmountCents int64  `json:"amount_cents"`
}

// Charge is one ledger entry of payments.charge.
type Charge struct {
	Seq     uint64 `json:"seq"`
	Session string `json:"session"`
	CallID  string `json:"call_id"`
	// Epoch is the epoch of the writer that charged (its fencing token).
	Epoch       uint64 `json:"epoch,omitempty"`
	Account     string `json:"account"`
	AmountCents int64  `json:"amount_cents"`
}

// PaymentsChargeTool returns payments.charge: non-idempotent at revision
// payments-v1. Every run appends one ledger entry, whatever came before.
func (t *Tools) PaymentsChargeTool() worker.Tool {
	return worker.Tool{
		Metadata: effect.Metadata{
			Name:        PaymentsCharge,
			Description: "Charge an account; every run appends a ledger entry (not idempotent).",
			Probe:       PaymentsLookup,
		}.WithEffect(effect.NonIdempotent, PaymentsRevision),
		InputSchema:    json.RawMessage(`{"type":"object","properties":{"account":{"type":"string","minLength":1},"amount_cents":{"type":"integer","minimum":1}},"required":["account","amount_cents"],"additionalProperties":false}`),
		CheckArguments: decodes[ChargeArgs],
		Timeout:        10 * time.Second,
		Body: func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			var a ChargeArgs
			if err := json.Unmarshal(req.Arguments, &a); err != nil {
				return nil, fmt.Errorf("payments.charge: %w", err)
			}
			tok := fenceOf(req)
			b, _ := json.Marshal(Charge{Session: req.Session, CallID: req.CallID, Epoch: tok.Epoch, Account: a.Account, AmountCents: a.AmountCents})
			var seq uint64
			if t.ledgerFence == nil {
				ack, err := t.cfg.JS.Publish(ctx, t.ledgerSub, b)
				if err != nil {
					return nil, fmt.Errorf("payments.charge: ledger: %w", err)
				}
				seq = ack.Sequence
			} else {
				// One compare-and-set on the session's ledger subject: refused
				// (nothing charged) once a newer writer of the session charged
				// or a reviewer raised the fence.
				var err error
				if seq, err = t.ledgerFence.Write(ctx, t.LedgerSubject(req.Session), tok, b); err != nil {
					if errors.Is(err, fence.ErrStale) {
						t.cfg.Logger.Warn().Err(err).Str("call_id", req.CallID).Msg("payments.charge refused: this writer was fenced")
					}
					return nil, fmt.Errorf("payments.charge: ledger: %w", err)
				}
			}
			return json.Marshal(map[string]any{"charge_seq": seq, "account": a.Account, "amount_cents": a.AmountCents})
		},
	}
}

// Ledger returns every ledger entry, for tests and the demo.
func (t *Tools) Ledger(ctx context.Context) ([]Charge, error) {
	info, err := t.ledger.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []Charge
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := t.ledger.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m.Header.Get(fence.HeaderMarker) != "" {
			continue // a raised fence, not a charge
		}
		var c Charge
		if err := json.Unmarshal(m.Data, &c); err != nil {
			return nil, err
		}
		c.Seq = seq
		out = append(out, c)
	}
	return out, nil
}

// ---- catalog.lookup ---------------------------------------------------

// Item is a catalog entry.
type Item struct {
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	PriceCents int64  `json:"price_cents"`
}

// Catalog is the fixed catalog catalog.lookup reads.
var Catalog = map[string]Item{
	"A-1": {SKU: "A-1", Name: "Anchor bolt", PriceCents: 120},
	"B-2": {SKU: "B-2", Name: "Bearing", PriceCents: 950},
	"C-3": {SKU: "C-3", Name: "Cable tie (100)", PriceCents: 399},
}

// CatalogLookupTool returns catalog.lookup: read-only at revision
// catalog-v1.
func (t *Tools) CatalogLookupTool() worker.Tool {
	return worker.Tool{
		Metadata: effect.Metadata{
			Name:        CatalogLookup,
			Description: "Look an item up by sku (read-only).",
		}.WithEffect(effect.ReadOnly, CatalogRevision),
		InputSchema: json.RawMessage(`{"type":"object","properties":{"sku":{"type":"string","minLength":1}},"required":["sku"]}`),
		Timeout:     5 * time.Second,
		Body: func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			var a struct {
				SKU string `json:"sku"`
			}
			if err := json.Unmarshal(req.Arguments, &a); err != nil {
				return nil, fmt.Errorf("catalog.lookup: %w", err)
			}
			it, ok := Catalog[a.SKU]
			if !ok {
				return nil, fmt.Errorf("%w: %s", ErrUnknownSKU, a.SKU)
			}
			return json.Marshal(it)
		},
	}
}
