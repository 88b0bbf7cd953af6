package recovery

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	"github.com/nats-io/nkeys"
)

// MaxKeyNameBytes bounds the name a trusted-keys file gives a key.
const MaxKeyNameBytes = 128

// KeyNames maps trusted nkey user public keys to the names a trusted-keys
// file gives them (ParseNamedKeys): the person or service a key belongs to.
// A key without a name maps to nothing. The zero (nil) value names no key.
// Safe for concurrent reads; build it once.
type KeyNames map[string]string

// Name returns the name of pub, or "" when it has none.
func (n KeyNames) Name(pub string) string { return n[pub] }

// ParseNamedKeys reads a trusted-keys file (reviewers, approvers or
// planners) with the names of its keys. A line is either
//
//	<public key> <name…>
//
// one key and the person it belongs to (the rest of the line, at most
// MaxKeyNameBytes, up to a " #" comment), or, the older form, one or more
// public keys separated by white space, without names. Blank lines and
// lines starting with # are ignored. A line whose first field is not an
// nkey user public key, a name that looks like a key (a mistyped key on an
// old-form line), a named line with more than one key, or a key listed
// twice with two different names is an error naming the line (wrapping
// ErrNotUserKey for a bad key). The names are for display: a verdict is
// trusted by its key, never by a name.
func ParseNamedKeys(text []byte) (TrustedKeys, KeyNames, error) {
	t, names := TrustedKeys{}, KeyNames{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		keys := 0
		for keys < len(fields) && nkeys.IsValidPublicUserKey(fields[keys]) {
			keys++
		}
		if keys == 0 {
			return nil, nil, fmt.Errorf("line %d: %w: %q", n, ErrNotUserKey, fields[0])
		}
		name := strings.Join(fields[keys:], " ")
		switch {
		case name == "":
		case keys > 1:
			return nil, nil, fmt.Errorf("line %d: a named line holds one key (%d keys before the name %q)", n, keys, name)
		case looksLikeKey(fields[keys]):
			return nil, nil, fmt.Errorf("line %d: %w: %q (a trusted key is an nkey user public key, 56 characters starting with U)", n, ErrNotUserKey, fields[keys])
		case len(name) > MaxKeyNameBytes:
			return nil, nil, fmt.Errorf("line %d: the name of %s is longer than %d bytes", n, fields[0], MaxKeyNameBytes)
		}
		for _, k := range fields[:keys] {
			if old, ok := names[k]; ok && name != "" && old != name {
				return nil, nil, fmt.Errorf("line %d: key %s is named %q and %q", n, k, old, name)
			}
			t[k] = struct{}{}
			if name != "" {
				names[k] = name
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	return t, names, nil
}

// looksLikeKey reports whether s has the shape of an nkey public key (56
// characters of upper-case base32: a user key mistyped, or an account's).
func looksLikeKey(s string) bool {
	if len(s) != 56 {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}
