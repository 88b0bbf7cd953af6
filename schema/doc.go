// Package schema holds jingwei's wire types (docs/protocol.md §5), their codec, the
// limits of docs/protocol.md §14, canonical JSON for argument comparison, and the JSON
// Schema files agents in other languages build against (schema/*.json).
//
// It is the leaf package every layer shares: it imports nothing internal but
// effect, and does no I/O beyond reading the io.Reader it is given.
//
// Every decoder of the package reads JSON with one strict reader, the token
// reader of github.com/go-json-experiment/json (jsontext, what becomes
// encoding/json/v2) with its strict defaults, plus the package's own rules.
// Whatever the message, an input is refused for bad syntax, data after the
// value, invalid UTF-8 or a lone surrogate escape, a duplicate member name
// in any object at any depth (arguments and output included), nesting
// deeper than 10,000, or a number beyond Canonical's bounds — so whatever a
// decoder accepts canonicalizes, and no two readers of a message can see
// different values in it. On top of that, DecodeEvent (and HistoryReader,
// and the recovery worker's classifier, which uses DecodeEvent),
// DecodeReview, DecodeRequest, DecodePlan and DecodeAssessment (and
// DecodeAssessments, for each member of a batch) refuse a
// member name that differs from one of the message's own fields only in
// case (a reader configured case-insensitive, as Jackson or
// System.Text.Json can be, would bind it), and a required member that has
// a valid zero value when it is missing (an event's epoch, a fence's
// epoch, a review's evidence, a plan's prior_seq and review). Unknown
// members are ignored and unknown event types are carried through by their
// envelope. Unmarshal applies the same lexical rules to any other body.
//
// Canonical JSON (Canonical, ArgsDigest) is RFC 8785 with one strictness
// on top: numbers are written as their exact decimal value, never rounded
// to a double.
//
// The JSON Schema files (draft 2020-12) are embedded: see Files.
//
// # Errors
//
// [Error] is jingwei's one coded error type, used by the pure core, the
// runtime, the services and the CLI: a stable [Code] (every wire code is
// declared in errors.go, once, each with one meaning), a message, and what
// a caller may need (Latest, Stage, Field, CallID, a cause). errors.Is
// matches by code against the sentinels (ErrCorruptHistory, …), and a
// group sentinel ([ErrPlanRefused]) matches every code of its group.
// [ErrorBody] is the one wire form of an error,
// {"error":{"code":"…","message":"…"}} (errorbody.schema.json): built with
// [NewErrorBody] or [EncodeError], read with [DecodeErrorBody]; [TextOf]
// is the one place a code is taken out of a message.
package schema
