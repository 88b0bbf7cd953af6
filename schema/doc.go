// Package schema holds jingwei's wire types (DESIGN §3), their codec, the
// limits of DESIGN §8, canonical JSON for argument comparison, and the JSON
// Schema files agents in other languages build against (schema/*.json).
//
// It is the leaf package every layer shares: it imports nothing internal but
// effect, and does no I/O beyond reading the io.Reader it is given.
//
// Decoding is strict where a lenient parser would let two readers disagree:
// DecodeEvent and HistoryReader refuse, as corrupt_history, a line with a
// duplicate member name anywhere (arguments and output included), invalid
// UTF-8 or a lone surrogate escape, or a member name that differs from one
// of the event's own fields only in case (encoding/json would bind it to
// that field; other languages would ignore it). Unknown members are ignored
// and unknown event types are carried through by their envelope.
//
// Canonical JSON (Canonical, ArgsDigest) is RFC 8785 with one strictness
// on top: numbers are written as their exact decimal value, never rounded
// to a double.
//
// The JSON Schema files (draft 2020-12) are embedded: see Files.
package schema
