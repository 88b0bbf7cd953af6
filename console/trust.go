package console

import (
	"fmt"
	"sort"

	"github.com/jingwei/jingwei/recovery"
)

// namedKey is a trusted key and its name, as the page lists them for the
// browser's key panel.
type namedKey struct{ Key, Name string }

// listKeys returns the keys of t with their names, sorted by key.
func listKeys(t recovery.TrustedKeys, names recovery.KeyNames) []namedKey {
	out := make([]namedKey, 0, len(t))
	for k := range t {
		out = append(out, namedKey{k, names.Name(k)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// signerName says who signed with key, as a page shows it: the name the
// trust file gives it; "trusted key (no name)"; "untrusted key" when the
// console knows the trusted keys and key is not one; else "".
func signerName(key string, t recovery.TrustedKeys, names recovery.KeyNames) string {
	switch {
	case key == "":
		return "unsigned"
	case names.Name(key) != "":
		return names.Name(key)
	case t == nil:
		return ""
	case t.Has(key):
		return "trusted key (no name)"
	}
	return "untrusted key"
}

// reviewerName is signerName for the trusted reviewers.
func (c *Console) reviewerName(key string) string {
	return signerName(key, c.cfg.TrustedReviewers, c.cfg.ReviewerNames)
}

// approverName is signerName for the trusted approvers.
func (c *Console) approverName(key string) string {
	return signerName(key, c.cfg.TrustedApprovers, c.cfg.ApproverNames)
}

// signedBy says who signed with key in a sentence's words: "alice
// (UABC…)", or the key alone.
func signedBy(name, key string) string {
	switch name {
	case "", "unsigned", "untrusted key", "trusted key (no name)":
		return key
	}
	return fmt.Sprintf("%s (%s)", name, short(key))
}
