package recovery_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
)

// TestParseNamedKeys: a trust file names each key ("<key> <name>"), the
// old forms (one key a line, several keys on a line) still read, and a
// mistyped key, an account key, two keys before a name or one key with
// two names are errors naming the line.
func TestParseNamedKeys(t *testing.T) {
	pub := func() string {
		kp, _ := nkeys.CreateUser()
		p, _ := kp.PublicKey()
		return p
	}
	a, b, c, d := pub(), pub(), pub(), pub()
	acct, _ := nkeys.CreateAccount()
	apub, _ := acct.PublicKey()
	text := "# reviewers\n" + a + " Alice Liddell\n\n" + b + "\tbob@ops # on call\n" + c + " " + d + "\n" + a + " Alice Liddell\n"
	keys, names, err := recovery.ParseNamedKeys([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 || !keys.Has(a) || !keys.Has(b) || !keys.Has(c) || !keys.Has(d) {
		t.Fatalf("keys %v", keys)
	}
	if names.Name(a) != "Alice Liddell" || names.Name(b) != "bob@ops" || names.Name(c) != "" || names.Name(d) != "" || len(names) != 2 {
		t.Fatalf("names %v", names)
	}
	if tk, err := recovery.ParseTrustedKeys([]byte(text)); err != nil || len(tk) != 4 {
		t.Fatalf("ParseTrustedKeys of a named file: %v, %v", tk, err)
	}
	mistyped := "U" + strings.Repeat("A", 55)
	for name, bad := range map[string]string{
		"not a key first":    "alice " + a + "\n",
		"mistyped second":    a + " " + mistyped + "\n",
		"account key second": a + " " + apub + "\n",
		"two keys and name":  a + " " + b + " alice\n",
		"two names":          a + " alice\n" + a + " mallory\n" + b + "\n",
		"long name":          a + " " + strings.Repeat("x", recovery.MaxKeyNameBytes+1) + "\n",
	} {
		_, _, err := recovery.ParseNamedKeys([]byte("# ok\n" + bad))
		line := "line 2"
		if name == "two names" {
			line = "line 3"
		}
		if err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("%s: %v, want an error naming %s", name, err, line)
		}
		if strings.Contains(name, "key") && !strings.Contains(name, "keys") && !errors.Is(err, recovery.ErrNotUserKey) {
			t.Errorf("%s: %v, want ErrNotUserKey", name, err)
		}
	}
}
