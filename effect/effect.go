// Package effect declares the side-effect contracts tools promise to keep.
//
// A tool's contract tells the recovery planner whether an uncertain call may
// be retried without a human looking at it: read-only and idempotent tools
// may, unknown and non-idempotent tools need a signed review first. The
// package is pure: no I/O, no NATS.
package effect

import (
	"fmt"
	"strings"
)

// Effect is what a tool promises about its side effects. The zero value is
// Unknown, which recovery treats like NonIdempotent.
type Effect uint8

const (
	// Unknown promises nothing; it is the default for a tool that declared
	// no effect. Recovery treats it like NonIdempotent.
	Unknown Effect = iota
	// ReadOnly promises that the tool has no write side effects.
	ReadOnly
	// Idempotent promises that the tool persists dedupe state keyed by
	// task + operation key, rejects the same key with different arguments,
	// and coordinates its external write with that record. An in-memory cache
	// of call ids does not keep this promise across restarts.
	Idempotent
	// NonIdempotent means the tool has side effects that cannot be repeated
	// blindly.
	NonIdempotent
)

// MaxRevisionBytes is the longest contract revision accepted (docs/protocol.md §14).
const MaxRevisionBytes = 1024

// kind is one row of the effect table: everything the code knows about an
// effect besides its constant.
type kind struct {
	// name is the wire value.
	name string
	// safe says an uncertain call under this effect may be retried
	// without a review (Safe).
	safe bool
}

// kinds is the effect table, indexed by Effect: the one place an effect is
// declared. Adding an effect is a constant above, a row here, the value in
// the JSON Schema files' effect enum (schema checks that they agree) and a
// test; every reader and writer of contracts derives from this table.
var kinds = []kind{
	Unknown:       {name: "unknown"},
	ReadOnly:      {name: "read_only", safe: true},
	Idempotent:    {name: "idempotent", safe: true},
	NonIdempotent: {name: "non_idempotent"},
}

// String returns the wire value: "unknown", "read_only", "idempotent" or
// "non_idempotent". An out-of-range value prints as "effect(N)".
func (e Effect) String() string {
	if int(e) < len(kinds) {
		return kinds[e].name
	}
	return fmt.Sprintf("effect(%d)", uint8(e))
}

// Valid reports whether e is one of the declared effects.
func (e Effect) Valid() bool { return int(e) < len(kinds) }

// Safe reports whether an uncertain call under this effect may be retried
// without a review: true for ReadOnly and Idempotent only.
func (e Effect) Safe() bool { return int(e) < len(kinds) && kinds[e].safe }

// Parse returns the effect for a wire value. The empty string is not
// accepted: a contract on the wire always names its effect.
func Parse(s string) (Effect, error) {
	for i, k := range kinds {
		if k.name == s {
			return Effect(i), nil
		}
	}
	return Unknown, fmt.Errorf("%w: %q (want %s)", ErrUnknownEffect, s, names())
}

// Lookup returns the effect whose wire value is name, and false if there
// is none. It is Parse for a decoder: it does not allocate, and name may
// alias a buffer the caller reuses.
func Lookup(name []byte) (Effect, bool) {
	for i, k := range kinds {
		if k.name == string(name) {
			return Effect(i), true
		}
	}
	return Unknown, false
}

// names lists the wire values for a message: "a, b, c or d".
func names() string {
	var b strings.Builder
	for i, k := range kinds {
		switch {
		case i == 0:
		case i == len(kinds)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(k.name)
	}
	return b.String()
}

// MarshalText implements encoding.TextMarshaler with the wire value.
func (e Effect) MarshalText() ([]byte, error) {
	if !e.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrUnknownEffect, uint8(e))
	}
	return []byte(kinds[e].name), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; see Parse.
func (e *Effect) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// Contract is the side-effect contract a host declares for a tool. Revision
// is bumped by the host whenever the tool's input or side-effect contract
// changes; a retry plan is only valid against the same revision. The zero
// value is an Unknown effect with an empty revision, which Validate rejects.
type Contract struct {
	Effect   Effect `json:"effect"`
	Revision string `json:"revision"`
}

// Validate checks that the effect is known and the revision is 1 to
// MaxRevisionBytes bytes long.
func (c Contract) Validate() error {
	if !c.Effect.Valid() {
		return fmt.Errorf("%w: %d", ErrUnknownEffect, uint8(c.Effect))
	}
	if c.Revision == "" {
		return ErrEmptyRevision
	}
	if len(c.Revision) > MaxRevisionBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrRevisionTooLong, len(c.Revision), MaxRevisionBytes)
	}
	return nil
}

// String formats the contract as "effect@revision".
func (c Contract) String() string { return c.Effect.String() + "@" + c.Revision }

// Metadata describes a tool to the runtime: its name, a human description and
// its contract. The zero Contract means Unknown with no revision.
type Metadata struct {
	// Name is the tool's name as agents call it, e.g. "orders.create".
	Name string
	// Description is free text for people and models.
	Description string
	// Contract is the declared side-effect contract. Defaults to Unknown.
	Contract Contract
	// Probe, on a tool whose calls can be uncertain (unknown or
	// non-idempotent), names a probe: a read-only tool of the same backend
	// that finds out whether a call took effect (package worker/prober).
	// Empty: no probe; every uncertain call waits for a person.
	Probe string
	// AuthoritativeNotFound, on a probe, declares that its not_found is
	// authoritative: the probe raises the store's fence to the session's
	// current epoch before it looks (so a frozen old writer's late write
	// is refused) or the backend deduplicates on the operation key. Only
	// then may a prober conclude not_executed from it (docs/protocol.md
	// §10.1).
	AuthoritativeNotFound bool
}

// WithEffect returns a copy of m declaring effect e at the given contract
// revision, e.g. meta.WithEffect(effect.Idempotent, "orders-v1").
func (m Metadata) WithEffect(e Effect, revision string) Metadata {
	m.Contract = Contract{Effect: e, Revision: revision}
	return m
}
