package schema

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// This file keeps the first implementation of the event rules, by v2's
// reflection over wire structs, as the reference the field-by-field
// decoder (eventcodec.go) is fuzzed against (FuzzEventReference).

type wireEvent struct {
	V       int          `json:"v"`
	Seq     uint64       `json:"seq"`
	Session string       `json:"session"`
	Epoch   *uint64      `json:"epoch"`
	At      time.Time    `json:"at"`
	Type    string       `json:"type"`
	Call    *wireCall    `json:"call"`
	Started *wireStarted `json:"started"`
	Result  *wireResult  `json:"result"`
	Fence   *wireFence   `json:"fence"`

	ApprovalRequest *wireApprovalRequest `json:"approval_request"`
	Approval        *wireApproval        `json:"approval"`
	Stop            *wireStop            `json:"stop"`

	Unknown jsontext.Value `json:",embed"`
}

// wireEnvelope is a wireEvent without its bodies: an event of an unknown
// type whose body-named members do not decode as the known bodies.
type wireEnvelope struct {
	V       int            `json:"v"`
	Seq     uint64         `json:"seq"`
	Session string         `json:"session"`
	Epoch   *uint64        `json:"epoch"`
	At      time.Time      `json:"at"`
	Type    string         `json:"type"`
	Unknown jsontext.Value `json:",embed"`
}

type wireCall struct {
	CallID         string         `json:"call_id"`
	Tool           string         `json:"tool"`
	Arguments      jsontext.Value `json:"arguments"`
	RequestID      string         `json:"request_id"`
	ProviderCallID string         `json:"provider_call_id"`
	StartMarker    bool           `json:"start_marker"`
	Started        bool           `json:"started"`
	Operation      *wireOperation `json:"operation"`
	Unknown        jsontext.Value `json:",embed"`
}

type wireOperation struct {
	Task     string         `json:"task"`
	Key      string         `json:"key"`
	Contract *wireContract  `json:"contract"`
	Retry    *wireRetry     `json:"retry"`
	Unknown  jsontext.Value `json:",embed"`
}

type wireRetry struct {
	PriorCallID string         `json:"prior_call_id"`
	PriorSeq    uint64         `json:"prior_seq"`
	PlanID      string         `json:"plan_id"`
	Basis       Basis          `json:"basis"`
	Review      *wireReview    `json:"review"`
	IssuedAt    time.Time      `json:"issued_at"`
	Signer      string         `json:"signer"`
	Sig         string         `json:"sig"`
	Unknown     jsontext.Value `json:",embed"`
}

type wireStarted struct {
	CallID  string         `json:"call_id"`
	Unknown jsontext.Value `json:",embed"`
}

type wireResult struct {
	CallID    string         `json:"call_id"`
	Status    Status         `json:"status"`
	Retryable bool           `json:"retryable"`
	Stage     Stage          `json:"stage"`
	Output    jsontext.Value `json:"output"`
	Error     string         `json:"error"`
	Unknown   jsontext.Value `json:",embed"`
}

type wireFence struct {
	Epoch   *uint64        `json:"epoch"`
	Owner   string         `json:"owner"`
	Unknown jsontext.Value `json:",embed"`
}

func referenceDecodeEvent(b []byte) (Event, error) {
	if firstByte(b) != '{' {
		if err := strictUnmarshal(b, new(jsontext.Value)); err != nil {
			return Event{}, corruptEvent(err)
		}
		return Event{}, Errorf(CodeCorruptHistory, "event is not a JSON object")
	}
	w := new(wireEvent)
	if err := strictUnmarshal(b, w); err != nil {
		var se *jsonv2.SemanticError
		if !errors.As(err, &se) {
			return Event{}, corruptEvent(err)
		}
		// A body member of the wrong type only matters for the known
		// types; an unknown type is decoded by its envelope alone.
		var env wireEnvelope
		if strictUnmarshal(b, &env) != nil || knownType(env.Type) {
			return Event{}, corruptEvent(err)
		}
		*w = wireEvent{V: env.V, Seq: env.Seq, Session: env.Session, Epoch: env.Epoch, At: env.At, Type: env.Type, Unknown: env.Unknown}
	}
	ev, err := w.event()
	if err != nil {
		return Event{}, err
	}
	if err := ev.Validate(); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// event checks what the wire form shows and the exported type does not
// (case variants of field names, required members with a valid zero
// value), and converts.
func (w *wireEvent) event() (Event, error) {
	if err := checkCase("", w.Unknown, envelopeFields); err != nil {
		return Event{}, corruptEvent(err)
	}
	if !knownType(w.Type) {
		// Members named like the bodies of known types mean nothing in
		// an unknown type: ignore them like any unknown member.
		w.Call, w.Started, w.Result, w.Fence = nil, nil, nil, nil
		w.ApprovalRequest, w.Approval, w.Stop = nil, nil, nil
	}
	if err := w.checkCase(); err != nil {
		return Event{}, corruptEvent(err)
	}
	if w.Epoch == nil {
		return Event{}, Errorf(CodeCorruptHistory, "event lacks epoch")
	}
	ev := Event{V: w.V, Seq: w.Seq, Session: w.Session, Epoch: *w.Epoch, At: w.At, Type: w.Type}
	if c := w.Call; c != nil {
		ev.Call = &Call{CallID: c.CallID, Tool: c.Tool, Arguments: json.RawMessage(c.Arguments), RequestID: c.RequestID,
			ProviderCallID: c.ProviderCallID, StartMarker: c.StartMarker, Started: c.Started}
		if o := c.Operation; o != nil {
			if o.Contract == nil {
				return Event{}, Errorf(CodeCorruptHistory, "operation.contract is missing")
			}
			op := &Operation{Task: o.Task, Key: o.Key, Contract: o.Contract.contract()}
			if r := o.Retry; r != nil {
				op.Retry = &RetryLink{PriorCallID: r.PriorCallID, PriorSeq: r.PriorSeq, PlanID: r.PlanID, Basis: r.Basis,
					IssuedAt: r.IssuedAt, Signer: r.Signer, Sig: r.Sig}
				if rv := r.Review; rv != nil {
					if rv.Evidence == nil {
						return Event{}, Errorf(CodeCorruptHistory, "operation.retry.review lacks evidence")
					}
					op.Retry.Review = rv.review()
				}
			}
			ev.Call.Operation = op
		}
	}
	if s := w.Started; s != nil {
		ev.Started = &Started{CallID: s.CallID}
	}
	if r := w.Result; r != nil {
		ev.Result = &Result{CallID: r.CallID, Status: r.Status, Retryable: r.Retryable, Stage: r.Stage,
			Output: json.RawMessage(r.Output), Error: r.Error}
	}
	if f := w.Fence; f != nil {
		if f.Epoch == nil {
			return Event{}, Errorf(CodeCorruptHistory, "session.fenced lacks fence.epoch")
		}
		ev.Fence = &Fence{Epoch: *f.Epoch, Owner: f.Owner}
	}
	if a := w.ApprovalRequest; a != nil {
		ev.ApprovalRequest = &ApprovalRequest{CallID: a.CallID, Deadline: a.Deadline}
	}
	if a := w.Approval; a != nil {
		ev.Approval = a.approval()
	}
	if s := w.Stop; s != nil {
		ev.Stop = &Stop{Task: s.Task, By: s.By, Reason: s.Reason}
	}
	return ev, nil
}

// checkCase refuses case variants of field names in the bodies.
func (w *wireEvent) checkCase() error {
	if c := w.Call; c != nil {
		if err := checkCase("call: ", c.Unknown, callFields); err != nil {
			return err
		}
		if o := c.Operation; o != nil {
			if err := checkCase("operation: ", o.Unknown, operationFields); err != nil {
				return err
			}
			if o.Contract != nil {
				if err := checkCase("operation.contract: ", o.Contract.Unknown, contractFields); err != nil {
					return err
				}
			}
			if r := o.Retry; r != nil {
				if err := checkCase("operation.retry: ", r.Unknown, retryFields); err != nil {
					return err
				}
				if r.Review != nil {
					if err := checkCase("operation.retry.review: ", r.Review.Unknown, reviewFields); err != nil {
						return err
					}
				}
			}
		}
	}
	if s := w.Started; s != nil {
		if err := checkCase("started: ", s.Unknown, startedFields); err != nil {
			return err
		}
	}
	if r := w.Result; r != nil {
		if err := checkCase("result: ", r.Unknown, resultFields); err != nil {
			return err
		}
	}
	if f := w.Fence; f != nil {
		if err := checkCase("fence: ", f.Unknown, fenceFields); err != nil {
			return err
		}
	}
	if a := w.ApprovalRequest; a != nil {
		if err := a.checkCase("approval_request"); err != nil {
			return err
		}
	}
	if a := w.Approval; a != nil {
		if err := a.checkCase("approval"); err != nil {
			return err
		}
	}
	if s := w.Stop; s != nil {
		if err := s.checkCase("stop"); err != nil {
			return err
		}
	}
	return nil
}

// FuzzEventReference holds the field-by-field event decoder (DecodeEvent,
// which the recovery worker's classifier uses too) to the reflection-based
// reference: the same verdict and code on every input, the same message
// whenever the input passes the decoding stage, and equal events.
func FuzzEventReference(f *testing.F) {
	for _, s := range referenceSeeds {
		f.Add([]byte(s))
	}
	files, _ := filepath.Glob("testdata/fuzz/FuzzDecoders/*")
	for _, fl := range files {
		b, err := os.ReadFile(fl)
		if err != nil {
			f.Fatal(err)
		}
		// The corpus file format: a header line, then []byte("...").
		if _, lit, ok := strings.Cut(string(b), "[]byte("); ok {
			if s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimSpace(lit), ")")); err == nil {
				f.Add([]byte(s))
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := referenceDecodeEvent(b)
		for name, decode := range map[string]func([]byte) (Event, error){"DecodeEvent": DecodeEvent} {
			got, err := decode(b)
			if CodeOf(err) != CodeOf(werr) || (err == nil) != (werr == nil) {
				t.Fatalf("%q: %s says %v, the reference %v", b, name, err, werr)
			}
			if err != nil {
				var e, we *Error
				errors.As(err, &e)
				errors.As(werr, &we)
				if !strings.Contains(e.Message, "not valid") && !strings.Contains(we.Message, "not valid") && e.Message != we.Message {
					t.Fatalf("%q: %s says %v, the reference %v", b, name, err, werr)
				}
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: %s decodes\n%+v\nthe reference\n%+v", b, name, got, want)
			}
		}
	})
}

// TestEventReference runs the reference comparison on the unit-test cases
// of history_test.go's shapes.
func TestEventReference(t *testing.T) {
	for _, s := range referenceSeeds {
		want, werr := referenceDecodeEvent([]byte(s))
		got, err := DecodeEvent([]byte(s))
		if CodeOf(err) != CodeOf(werr) || (err == nil) != (werr == nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("%s:\n got %+v, %v\nwant %+v, %v", s, got, err, want, werr)
		}
	}
}

const refEnv = `"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:01Z"`

var referenceSeeds = []string{
	`{` + refEnv + `,"type":"tool.call","call":{"call_id":"c-1","tool":"orders.create","arguments":{"sku":"A-1","qty":2},"start_marker":true,"operation":{"task":"t-1","key":"op-1","contract":{"effect":"idempotent","revision":"orders-v1"}}}}`,
	`{"call":{"call_id":"c-1","tool":"t","arguments":[1,2],"operation":{"task":"t","key":"k","contract":{"revision":"r"}}},` + refEnv + `,"type":"tool.call"}`,
	`{"call":{"call_id":7},` + refEnv + `,"type":"tool.progress"}`,
	`{` + refEnv + `,"type":"tool.progress","call":{"Call_ID":1},"Fence":2}`,
	`{` + refEnv + `,"type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"operation":{"task":"t","key":"k","contract":{"effect":null,"revision":"r"}}}}`,
	`{` + refEnv + `,"type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"operation":{"task":"t","key":"k","contract":{"effect":"idempotent","revision":"r"},"retry":{"prior_call_id":"c-0","prior_seq":3,"plan_id":"p","basis":"reviewed_not_executed","issued_at":"2026-11-29T10:00:00+01:00","signer":"UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4","sig":"c2ln","review":{"v":1,"session":"s-1","call_id":"c-0","operator":"a","evidence":null,"verdict":"not_executed"}}}},"started":null}`,
	`{` + refEnv + `,"type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{}},"started":{"call_id":"c-1"}}`,
	`{` + refEnv + `,"type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"started":true,"start_marker":false,"operation":{"task":"t","key":"k","contract":{"effect":"idempotent","revision":"r"}}}}`,
	`{` + refEnv + `,"type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"started":true,"start_marker":true}}`,
	`{` + refEnv + `,"type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"started":null,"Started":true}}`,
	`{` + refEnv + `,"type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"started":1}}`,
	`{` + refEnv + `,"type":"tool.result","result":{"call_id":"c-1","status":"rejected","stage":"guard","retryable":null,"output":null,"error":"e\u00e9","x":[1e5]}}`,
	`{` + refEnv + `,"type":"session.fenced","fence":{"owner":"w"}}`,
	`{` + refEnv + `,"type":"session.fenced","fence":{"epoch":9007199254740992,"owner":"w"}}`,
	`{"v":1,"seq":-1,"session":"s","epoch":1,"at":"2026-11-29T10:00:01Z","type":"x"}`,
	`{"v":1.5,"session":"s","epoch":1,"at":"2026-11-29T10:00:01Z","type":"x"}`,
	`{"v":1,"session":"s","epoch":null,"at":"2026-11-29T24:00:01Z","type":"x"}`,
	`{"v":1,"session":"s","epoch":1,"at":"2026-11-29T10:00:01,5Z","type":"x"}`,
	`{"v":1,"session":"s","epoch":1,"at":"2026-11-29T10:00:01+24:00","type":"x"}`,
	`{"v":1,"session":"s","epoch":1,"at":"2026-11-29T10:00:01\u002b01:00","type":"x","\u0053ession":1}`,
	`{"v":1,"session":"s","epoch":1,"at":"2026-11-29T10:00:01Z","type":"x"} x`,
	`{"v":1,"session":"s","epoch":1,"at":"2026-11-29T10:00:01Z","type":"x","n":1e99999}`,
	`{"v":1,"session":"s","epoch":1,"at":"2026-11-29T10:00:01Z","type":"x","ſession":1,"\u212Aey":2}`,
	`[]`, `null`, ``, `{`, `{"v":1,"v":1}`,
}
