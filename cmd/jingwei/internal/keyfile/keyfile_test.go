package keyfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestWriteThenLoad writes a seed 0600, refuses to replace it, and loads
// it back; a file that holds no user seed is refused.
func TestWriteThenLoad(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	file := filepath.Join(t.TempDir(), "k.nk")
	if err := WriteSecret(file, append(seed, '\n')); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if err := WriteSecret(file, []byte("x")); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("replacing: %v", err)
	}
	got, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := got.PublicKey(); p != pub {
		t.Errorf("loaded %s, want %s", p, pub)
	}
	op, _ := nkeys.CreateOperator()
	opSeed, _ := op.Seed()
	bad := filepath.Join(t.TempDir(), "op.nk")
	_ = os.WriteFile(bad, opSeed, 0o600)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "not an nkey user seed") {
		t.Errorf("operator seed: %v", err)
	}
}

func TestTrustLine(t *testing.T) {
	if line, err := TrustLine("UABC", ""); line != "" || err != nil {
		t.Errorf("no name: %q, %v", line, err)
	}
	for _, bad := range []string{"a # b", "a\nb", strings.Repeat("x", 1000)} {
		if _, err := TrustLine("UABC", bad); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	if line, err := TrustLine(pub, "  Alice   Smith "); err != nil || line != pub+" Alice Smith" {
		t.Errorf("TrustLine = %q, %v", line, err)
	}
}
