package schema

import (
	"bytes"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/jingwei/jingwei/effect"
)

// Events are the hot message: the recovery worker's classifier decodes
// every event of every log, Inspect and export every event of a history.
// They are decoded field by field from the v2 token reader (jsontext)
// rather than by v2's reflection over wire structs, which took twice the
// time. The reader still does all the lexical work (syntax, UTF-8, lone
// surrogates, duplicate names at any depth, nesting); this file maps
// members to fields with the semantics of v2's default unmarshaling (null
// is the zero value, integers without fraction or exponent and in range, a
// time in RFC 3339) and the package's own rules (case variants, presence,
// number bounds in raw values). The reflection-based decoder of the same
// rules is kept in the tests as the reference the fuzz target compares
// this one with.

// eventReader decodes one event. It is pooled with its reader.
type eventReader struct {
	r       *reader
	dec     *jsontext.Decoder
	line    []byte
	name    []byte // the member name just read (aliases the decoder or scratch)
	scratch []byte
	// Required members found missing in a body, reported once the whole
	// event is read (after the envelope's epoch), in this order.
	noContract, noEvidence, noFenceEpoch bool
}

// event decodes the event at the decoder.
func (d *eventReader) event() (Event, error) {
	var (
		ev       Event
		epochSet bool
		typeSet  bool
		typ      *eventType // the event's type once read, nil while unknown
		pending  [numBodies][]byte
		err      error
	)
	if ok, err := d.object(""); !ok {
		if err == nil {
			err = Errorf(CodeCorruptHistory, "event is not a JSON object")
		}
		return ev, err
	}
	for d.member(&err) {
		switch string(d.name) {
		case "v":
			ev.V, err = d.int("v")
		case "seq":
			ev.Seq, _, err = d.uint("seq")
		case "session":
			ev.Session, err = d.str("session")
		case "epoch":
			ev.Epoch, epochSet, err = d.uint("epoch")
		case "at":
			ev.At, err = d.time("at")
		case "type":
			ev.Type, typ, err = d.eventType()
			typeSet = true
		default:
			if i := bodyNamed(d.name); i >= 0 {
				err = d.body(i, &ev, typ, typeSet, &pending[i])
			} else {
				err = d.unknown("", envelopeFields)
			}
		}
	}
	if err != nil {
		return ev, err
	}
	if err = checkEnd(d.dec, d.line); err != nil {
		return ev, err
	}
	// Bodies that came before the type, of a known type: decode them now
	// (from copies, so nothing aliases a reader buffer).
	if typ != nil {
		if err := d.pendingBodies(&ev, &pending); err != nil {
			return ev, err
		}
	}
	switch {
	case !epochSet:
		return ev, Errorf(CodeCorruptHistory, "event lacks epoch")
	case d.noContract:
		return ev, Errorf(CodeCorruptHistory, "operation.contract is missing")
	case d.noEvidence:
		return ev, Errorf(CodeCorruptHistory, "operation.retry.review lacks evidence")
	case d.noFenceEpoch:
		return ev, Errorf(CodeCorruptHistory, "session.fenced lacks fence.epoch")
	}
	return ev, nil
}

// body reads the member of body i: decoded when the event's type is known
// (whichever body the type carries: Validate then refuses a body that
// does not match), skipped when it is unknown, kept raw in pending until
// the type is read otherwise.
func (d *eventReader) body(i int, ev *Event, typ *eventType, typeSet bool, pending *[]byte) error {
	switch {
	case typ != nil:
		p, err := bodies[i].read(d)
		bodies[i].put(ev, p)
		return err
	case typeSet:
		return d.skip()
	}
	v, err := d.dec.ReadValue()
	if err != nil {
		return err
	}
	if err := d.numbers(v); err != nil {
		return err
	}
	*pending = bytes.Clone(v)
	return nil
}

// reflect reads the value at the decoder into w, a wire struct, by
// v2's reflection under the package's strict rules (the bodies of rare
// events), its numbers checked first.
func (d *eventReader) reflect(w any) error {
	v, err := d.dec.ReadValue()
	if err != nil {
		return err
	}
	if err := d.numbers(v); err != nil {
		return err
	}
	return strictUnmarshal(v, w)
}

// pendingBodies decodes the bodies read before the type, each with a
// reader of its own: first those decoded by reflection (the rare ones the
// fast encoder leaves to the reference), then the others, each group in
// table order.
func (d *eventReader) pendingBodies(ev *Event, pending *[numBodies][]byte) error {
	for _, rare := range [...]bool{true, false} {
		for i, raw := range pending {
			if raw == nil || (bodies[i].append == nil) != rare {
				continue
			}
			sub := &eventReader{r: getReader(raw), line: raw}
			sub.dec = sub.r.dec
			p, err := bodies[i].read(sub)
			bodies[i].put(ev, p)
			putReader(sub.r)
			if err != nil {
				return err
			}
			d.noContract = d.noContract || sub.noContract
			d.noEvidence = d.noEvidence || sub.noEvidence
			d.noFenceEpoch = d.noFenceEpoch || sub.noFenceEpoch
		}
	}
	return nil
}

func (d *eventReader) call(path string) (*Call, error) {
	if ok, err := d.object(path); !ok {
		return nil, err
	}
	c := new(Call)
	var err error
	for d.member(&err) {
		switch string(d.name) {
		case "call_id":
			c.CallID, err = d.str("call.call_id")
		case "tool":
			c.Tool, err = d.str("call.tool")
		case "arguments":
			c.Arguments, err = d.raw()
		case "request_id":
			c.RequestID, err = d.str("call.request_id")
		case "provider_call_id":
			c.ProviderCallID, err = d.str("call.provider_call_id")
		case "start_marker":
			c.StartMarker, err = d.bool("call.start_marker")
		case "started":
			c.Started, err = d.bool("call.started")
		case "operation":
			c.Operation, err = d.operation("call.operation")
		default:
			err = d.unknown("call", callFields)
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (d *eventReader) operation(path string) (*Operation, error) {
	if ok, err := d.object(path); !ok {
		return nil, err
	}
	op := new(Operation)
	contract := false
	var err error
	for d.member(&err) {
		switch string(d.name) {
		case "task":
			op.Task, err = d.str("call.operation.task")
		case "key":
			op.Key, err = d.str("call.operation.key")
		case "contract":
			contract, err = d.contract("call.operation.contract", &op.Contract)
		case "retry":
			op.Retry, err = d.retry("call.operation.retry")
		default:
			err = d.unknown("operation", operationFields)
		}
	}
	if err != nil {
		return nil, err
	}
	if !contract {
		d.noContract = true
	}
	return op, nil
}

// contract reads a contract into c; false for null (a missing contract).
// An absent effect is effect.Unknown, a null one an error.
func (d *eventReader) contract(path string, c *effect.Contract) (bool, error) {
	if ok, err := d.object(path); !ok {
		return false, err
	}
	var err error
	for d.member(&err) {
		switch string(d.name) {
		case "effect":
			err = d.effect("call.operation.contract.effect", &c.Effect)
		case "revision":
			c.Revision, err = d.str("call.operation.contract.revision")
		default:
			err = d.unknown("operation.contract", contractFields)
		}
	}
	return err == nil, err
}

func (d *eventReader) effect(path string, e *effect.Effect) error {
	switch d.dec.PeekKind() {
	case '"':
		v, err := d.dec.ReadValue()
		if err != nil {
			return err
		}
		var s []byte = v[1 : len(v)-1]
		if bytes.IndexByte(v, '\\') >= 0 {
			d.scratch, _ = jsontext.AppendUnquote(d.scratch[:0], v)
			s = d.scratch
		}
		k, ok := effect.Lookup(s)
		if !ok {
			_, err := effect.Parse(string(s))
			return &fieldError{path: path, err: err}
		}
		*e = k
		return nil
	case 'n':
		if _, err := d.dec.ReadValue(); err != nil {
			return err
		}
		return &fieldError{path: path, err: errNullEffect}
	case 0:
		_, err := d.dec.ReadValue()
		return err
	}
	if _, err := d.dec.ReadValue(); err != nil {
		return err
	}
	return &fieldError{path: path, err: errEffectType}
}

func (d *eventReader) retry(path string) (*RetryLink, error) {
	if ok, err := d.object(path); !ok {
		return nil, err
	}
	r := new(RetryLink)
	var err error
	for d.member(&err) {
		switch string(d.name) {
		case "prior_call_id":
			r.PriorCallID, err = d.str("call.operation.retry.prior_call_id")
		case "prior_seq":
			r.PriorSeq, _, err = d.uint("call.operation.retry.prior_seq")
		case "plan_id":
			r.PlanID, err = d.str("call.operation.retry.plan_id")
		case "basis":
			var s string
			s, err = d.str("call.operation.retry.basis")
			r.Basis = Basis(s)
		case "review":
			r.Review, err = d.review("call.operation.retry.review")
		case "issued_at":
			r.IssuedAt, err = d.time("call.operation.retry.issued_at")
		case "signer":
			r.Signer, err = d.str("call.operation.retry.signer")
		case "sig":
			r.Sig, err = d.str("call.operation.retry.sig")
		default:
			err = d.unknown("operation.retry", retryFields)
		}
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (d *eventReader) review(path string) (*Review, error) {
	if ok, err := d.object(path); !ok {
		return nil, err
	}
	r := new(Review)
	evidence := false
	var err error
	for d.member(&err) {
		switch string(d.name) {
		case "v":
			r.V, err = d.int("call.operation.retry.review.v")
		case "session":
			r.Session, err = d.str("call.operation.retry.review.session")
		case "call_id":
			r.CallID, err = d.str("call.operation.retry.review.call_id")
		case "operator":
			r.Operator, err = d.str("call.operation.retry.review.operator")
		case "evidence":
			evidence = d.dec.PeekKind() != 'n'
			r.Evidence, err = d.str("call.operation.retry.review.evidence")
		case "verdict":
			var s string
			s, err = d.str("call.operation.retry.review.verdict")
			r.Verdict = Verdict(s)
		case "probe":
			r.Probe, err = d.str("call.operation.retry.review.probe")
		case "at":
			r.At, err = d.str("call.operation.retry.review.at")
		case "signer":
			r.Signer, err = d.str("call.operation.retry.signer")
		case "sig":
			r.Sig, err = d.str("call.operation.retry.sig")
		default:
			err = d.unknown("operation.retry.review", reviewFields)
		}
	}
	if err != nil {
		return nil, err
	}
	if !evidence {
		d.noEvidence = true
	}
	return r, nil
}

func (d *eventReader) started(path string) (*Started, error) {
	if ok, err := d.object(path); !ok {
		return nil, err
	}
	s := new(Started)
	var err error
	for d.member(&err) {
		switch string(d.name) {
		case "call_id":
			s.CallID, err = d.str("started.call_id")
		default:
			err = d.unknown("started", startedFields)
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (d *eventReader) result(path string) (*Result, error) {
	if ok, err := d.object(path); !ok {
		return nil, err
	}
	r := new(Result)
	var err error
	for d.member(&err) {
		switch string(d.name) {
		case "call_id":
			r.CallID, err = d.str("result.call_id")
		case "status":
			r.Status, err = readEnum(d, "result.status", statuses)
		case "retryable":
			r.Retryable, err = d.bool("result.retryable")
		case "stage":
			r.Stage, err = readEnum(d, "result.stage", stages)
		case "output":
			r.Output, err = d.raw()
		case "error":
			r.Error, err = d.str("result.error")
		default:
			err = d.unknown("result", resultFields)
		}
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (d *eventReader) fence(path string) (*Fence, error) {
	if ok, err := d.object(path); !ok {
		return nil, err
	}
	f := new(Fence)
	epoch := false
	var err error
	for d.member(&err) {
		switch string(d.name) {
		case "epoch":
			f.Epoch, epoch, err = d.uint("fence.epoch")
		case "owner":
			f.Owner, err = d.str("fence.owner")
		default:
			err = d.unknown("fence", fenceFields)
		}
	}
	if err != nil {
		return nil, err
	}
	if !epoch {
		d.noFenceEpoch = true
	}
	return f, nil
}

var eventReaderPool = sync.Pool{New: func() any { return new(eventReader) }}

// decodeEvent decodes and validates one event.
func decodeEvent(b []byte) (Event, error) {
	if firstByte(b) != '{' {
		if err := strictUnmarshal(b, new(jsontext.Value)); err != nil {
			return Event{}, corruptEvent(err)
		}
		return Event{}, Errorf(CodeCorruptHistory, "event is not a JSON object")
	}
	d := eventReaderPool.Get().(*eventReader)
	d.r = getReader(b)
	d.dec, d.line = d.r.dec, b
	ev, err := d.event()
	putReader(d.r)
	d.r, d.dec, d.line, d.name = nil, nil, nil, nil
	d.noContract, d.noEvidence, d.noFenceEpoch = false, false, false
	if cap(d.scratch) > 64<<10 {
		d.scratch = nil
	}
	eventReaderPool.Put(d)
	if err != nil {
		if e, ok := err.(*Error); ok {
			return Event{}, e
		}
		return Event{}, corruptEvent(err)
	}
	if err := ev.Validate(); err != nil {
		return Event{}, err
	}
	return ev, nil
}
