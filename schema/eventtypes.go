package schema

import (
	"reflect"
	"unsafe"
)

// Event types are declared once, in eventTypes below: a type's name, the
// body it carries and the checks of that body beyond its presence. The
// bodies are declared once, in bodies: the envelope member that carries
// one, its Event field, how the event decoder reads it and how the fast
// encoder writes it. Everything that depends on the set of types or
// bodies derives from these two tables: Validate, the event decoder
// (which members are bodies, which types have their bodies read), the
// fast encoder (which body to write, which events to leave to the
// reference encoder), the encoder's size hint, Event.CallID and the
// envelope's field names. Unknown types are carried through with their
// envelope only, as docs/protocol.md §5 requires.
//
// Adding an event type that carries an existing body is a constant, a
// row in eventTypes, its branch in event.schema.json's allOf
// (TestEnumsMatchSchemaFiles holds the two to each other) and its tests.
// A new body is also an Event field and a row in bodies.

// eventType is one row of the event type table.
type eventType struct {
	// name is the wire value of the event's type member.
	name string
	// body is the index in bodies of the one body the type carries.
	body int
	// check checks the body (p, never nil) of an event of this type, in
	// the given session, beyond its presence; nil checks nothing more.
	check func(p unsafe.Pointer, session string) error
}

// newType returns the row of an event type whose body (bodies[b]) is
// checked by check (nil: presence only).
func newType[T any](name string, b int, check func(v *T, session string) error) eventType {
	if bodies[b].elem != reflect.TypeFor[T]() {
		panic("schema: event type " + name + " checks a body that is not its own")
	}
	t := eventType{name: name, body: b}
	if check != nil {
		t.check = func(p unsafe.Pointer, session string) error { return check((*T)(p), session) }
	}
	return t
}

// eventTypes is the event type table, in the order of docs/protocol.md §5.
var eventTypes = []eventType{
	newType(TypeCall, bodyCall, func(c *Call, _ string) error { return c.validate() }),
	newType(TypeStarted, bodyStarted, func(s *Started, _ string) error { return checkID("started.call_id", s.CallID) }),
	newType(TypeResult, bodyResult, func(r *Result, _ string) error { return r.validate() }),
	newType(TypeFenced, bodyFence, checkFence),
	newType(TypeApprovalRequested, bodyApprovalRequest, checkApprovalRequest),
	newType(TypeApprovalGranted, bodyApproval, checkApprovalGranted),
	newType(TypeTaskStopped, bodyStop, checkStop),
}

// body is one row of the body table. Its functions take and return the
// body as an unsafe.Pointer to its type (the row is made by bodyDef.row,
// which types them), never the *Event: a function value that took the
// event would make every event the codec reads or writes escape to the
// heap. offset locates the body's pointer in Event.
type body struct {
	// member is the envelope member that carries the body.
	member string
	// elem is the body's Go type, offset the offset in Event of the
	// field that points to it.
	elem   reflect.Type
	offset uintptr
	// read decodes the body at d's decoder (the member's value); nil for
	// null.
	read func(d *eventReader) (unsafe.Pointer, error)
	// append appends the body (the member's value) as EncodeEvent writes
	// it; false leaves the event to the reference encoder. nil for a body
	// whose events are always left to it (rare events, decoded by
	// reflection).
	append func(b []byte, p unsafe.Pointer) ([]byte, bool)
	// callID returns the call the body refers to; nil for a body that
	// refers to none.
	callID func(p unsafe.Pointer) string
	// size guesses the length of the body beyond encodedSizeHint's base,
	// for the encoder's buffer; nil for a small one.
	size func(p unsafe.Pointer) int
}

// get returns e's body of this row, nil if e has none.
func (b *body) get(e *Event) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(e), b.offset))
}

// put sets e's body of this row to p.
func (b *body) put(e *Event, p unsafe.Pointer) {
	*(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(e), b.offset)) = p
}

// bodyDef declares a body with typed functions (see body); row makes its
// row of the table.
type bodyDef[T any] struct {
	member string
	// field returns the address of the Event field that points to the
	// body: row takes its offset from it.
	field  func(e *Event) **T
	read   func(d *eventReader) (*T, error)
	append func(b []byte, v *T) ([]byte, bool)
	callID func(v *T) string
	size   func(v *T) int
}

func (def bodyDef[T]) row() body {
	var e Event
	b := body{
		member: def.member,
		elem:   reflect.TypeFor[T](),
		offset: uintptr(unsafe.Pointer(def.field(&e))) - uintptr(unsafe.Pointer(&e)),
		read: func(d *eventReader) (unsafe.Pointer, error) {
			v, err := def.read(d)
			return unsafe.Pointer(v), err
		},
	}
	if def.append != nil {
		b.append = func(buf []byte, p unsafe.Pointer) ([]byte, bool) { return def.append(buf, (*T)(p)) }
	}
	if def.callID != nil {
		b.callID = func(p unsafe.Pointer) string { return def.callID((*T)(p)) }
	}
	if def.size != nil {
		b.size = func(p unsafe.Pointer) int { return def.size((*T)(p)) }
	}
	return b
}

// Indexes of the bodies, in the order of Event's fields (and so of the
// members encoding/json writes).
const (
	bodyCall = iota
	bodyStarted
	bodyResult
	bodyFence
	bodyApprovalRequest
	bodyApproval
	bodyStop
	numBodies
)

// bodies is the body table, indexed by the body constants.
var bodies = [numBodies]body{
	bodyCall: bodyDef[Call]{
		member: "call",
		field:  func(e *Event) **Call { return &e.Call },
		read:   func(d *eventReader) (*Call, error) { return d.call("call") },
		append: appendCall,
		callID: func(c *Call) string { return c.CallID },
		size:   callSize,
	}.row(),
	bodyStarted: bodyDef[Started]{
		member: "started",
		field:  func(e *Event) **Started { return &e.Started },
		read:   func(d *eventReader) (*Started, error) { return d.started("started") },
		append: appendStarted,
		callID: func(s *Started) string { return s.CallID },
	}.row(),
	bodyResult: bodyDef[Result]{
		member: "result",
		field:  func(e *Event) **Result { return &e.Result },
		read:   func(d *eventReader) (*Result, error) { return d.result("result") },
		append: appendResult,
		callID: func(r *Result) string { return r.CallID },
		size:   func(r *Result) int { return 64 + len(r.CallID) + len(r.Output) + len(r.Error) },
	}.row(),
	bodyFence: bodyDef[Fence]{
		member: "fence",
		field:  func(e *Event) **Fence { return &e.Fence },
		read:   func(d *eventReader) (*Fence, error) { return d.fence("fence") },
		append: appendFence,
		size:   func(f *Fence) int { return len(f.Owner) },
	}.row(),
	bodyApprovalRequest: bodyDef[ApprovalRequest]{
		member: "approval_request",
		field:  func(e *Event) **ApprovalRequest { return &e.ApprovalRequest },
		read:   readApprovalRequest,
		callID: func(a *ApprovalRequest) string { return a.CallID },
	}.row(),
	bodyApproval: bodyDef[Approval]{
		member: "approval",
		field:  func(e *Event) **Approval { return &e.Approval },
		read:   readApproval,
		callID: func(a *Approval) string { return a.CallID },
	}.row(),
	bodyStop: bodyDef[Stop]{
		member: "stop",
		field:  func(e *Event) **Stop { return &e.Stop },
		read:   readStop,
	}.row(),
}

// eventTypeOf returns the row of a declared event type, nil for an
// unknown one.
func eventTypeOf(name string) *eventType {
	for i := range eventTypes {
		if eventTypes[i].name == name {
			return &eventTypes[i]
		}
	}
	return nil
}

// eventTypeNamed is eventTypeOf for a name in a decoder's buffer.
func eventTypeNamed(name []byte) *eventType {
	for i := range eventTypes {
		if eventTypes[i].name == string(name) {
			return &eventTypes[i]
		}
	}
	return nil
}

// knownType reports whether t is a declared event type.
func knownType(t string) bool { return eventTypeOf(t) != nil }

// bodyNamed returns the index of the body an envelope member carries, or
// -1 if the member carries none.
func bodyNamed(member []byte) int {
	for i := range bodies {
		if bodies[i].member == string(member) {
			return i
		}
	}
	return -1
}

// bodyCount returns how many bodies e carries.
func (e *Event) bodyCount() int {
	n := 0
	for i := range bodies {
		if bodies[i].get(e) != nil {
			n++
		}
	}
	return n
}

// CallID returns the call id the event refers to, or "" for events that refer
// to no call (session.fenced, task.stopped, unknown types).
func (e *Event) CallID() string {
	for i := range bodies {
		if b := &bodies[i]; b.callID != nil {
			if p := b.get(e); p != nil {
				return b.callID(p)
			}
		}
	}
	return ""
}

// envelopeFields are the envelope's member names, for checkCase: its own
// and the bodies'.
var envelopeFields = func() []string {
	f := []string{"v", "seq", "session", "epoch", "at", "type"}
	for _, b := range bodies {
		f = append(f, b.member)
	}
	return f
}()

// article returns "an" before a member name that starts with a vowel, "a"
// otherwise, for messages.
func article(member string) string {
	switch member[0] {
	case 'a', 'e', 'i', 'o', 'u':
		return "an"
	}
	return "a"
}
