// Package schema holds jingwei's wire types (DESIGN §3), their codec, the
// limits of DESIGN §8, canonical JSON for argument comparison, and the JSON
// Schema files agents in other languages build against (schema/*.json).
//
// It is the leaf package every layer shares: it imports nothing internal but
// effect, and does no I/O beyond reading the io.Reader it is given.
package schema
