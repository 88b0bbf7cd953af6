// Package effect declares the side-effect contracts tools promise to keep.
//
// A tool's contract tells the recovery planner whether an uncertain call may
// be retried without a human looking at it: read-only and idempotent tools
// may, unknown and non-idempotent tools need a signed review first. The
// package is pure: no I/O, no NATS.
package effect

import "fmt"

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

var wire = []string{
	Unknown:       "unknown",
	ReadOnly:      "read_only",
	Idempotent:    "idempotent",
	NonIdempotent: "non_idempotent",
}

// String returns the wire value: "unknown", "read_only", "idempotent" or
// "non_idempotent". An out-of-range value prints as "effect(N)".
func (e Effect) String() string {
	if int(e) < len(wire) {
		return wire[e]
	}
	return fmt.Sprintf("effect(%d)", uint8(e))
}

// Valid reports whether e is one of the four declared effects.
func (e Effect) Valid() bool { return int(e) < len(wire) }

// Safe reports whether an uncertain call under this effect may be retried
// without a review: true for ReadOnly and Idempotent only.
func (e Effect) Safe() bool { return e == ReadOnly || e == Idempotent }

// Parse returns the effect for a wire value. The empty string is not
// accepted: a contract on the wire always names its effect.
func Parse(s string) (Effect, error) {
	for i, w := range wire {
		if w == s {
			return Effect(i), nil
		}
	}
	return Unknown, fmt.Errorf("%w: %q (want unknown, read_only, idempotent or non_idempotent)", ErrUnknownEffect, s)
}

// MarshalText implements encoding.TextMarshaler with the wire value.
func (e Effect) MarshalText() ([]byte, error) {
	if !e.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrUnknownEffect, uint8(e))
	}
	return []byte(wire[e]), nil
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
}

// WithEffect returns a copy of m declaring effect e at the given contract
// revision, e.g. meta.WithEffect(effect.Idempotent, "orders-v1").
func (m Metadata) WithEffect(e Effect, revision string) Metadata {
	m.Contract = Contract{Effect: e, Revision: revision}
	return m
}
