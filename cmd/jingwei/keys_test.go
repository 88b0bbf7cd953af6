package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
)

func TestKeys(t *testing.T) {
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "alice.nk")

	st, out, _ := runCLI("keys", "new", "--out", seedFile)
	if st != exitOK {
		t.Fatalf("keys new: exit %d", st)
	}
	pub := strings.TrimSpace(out)
	if !nkeys.IsValidPublicUserKey(pub) {
		t.Fatalf("keys new printed %q, not a user public key", pub)
	}
	fi, err := os.Stat(seedFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	kp, err := loadUserKey(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := kp.PublicKey(); got != pub {
		t.Fatalf("seed's public key %s, printed %s", got, pub)
	}
	before, _ := os.ReadFile(seedFile)

	// A server key is not a reviewer key; garbage is no key.
	srv, _ := nkeys.CreateServer()
	srvSeed, _ := srv.Seed()
	serverFile := writeFile(t, "server.nk", string(srvSeed))
	garbage := writeFile(t, "garbage.nk", "not a seed")

	tests := []struct {
		name   string
		args   []string
		status int
		out    string // stdout must contain it
	}{
		{"new over an existing file", []string{"keys", "new", "--out", seedFile}, exitUsage, ""},
		{"new with an empty --out", []string{"keys", "new", "--out", ""}, exitUsage, ""},
		{"new --json", []string{"keys", "new", "--out", filepath.Join(dir, "bob.nk"), "--json"}, exitOK, `"seed_file":"` + filepath.Join(dir, "bob.nk")},
		{"pub", []string{"keys", "pub", "--key", seedFile}, exitOK, pub},
		{"pub --json", []string{"keys", "pub", "--key", seedFile, "--json"}, exitOK, `"public_key":"` + pub},
		{"pub without --key", []string{"keys", "pub"}, exitUsage, ""},
		{"pub of a missing file", []string{"keys", "pub", "--key", filepath.Join(dir, "missing")}, exitUsage, ""},
		{"pub of a server seed", []string{"keys", "pub", "--key", serverFile}, exitUsage, ""},
		{"pub of garbage", []string{"keys", "pub", "--key", garbage}, exitUsage, ""},
		{"no subcommand", []string{"keys"}, exitUsage, ""},
		{"unknown subcommand", []string{"keys", "rotate"}, exitUsage, ""},
		{"help", []string{"keys", "--help"}, exitOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, out, errOut := runCLI(tt.args...)
			if st != tt.status || !strings.Contains(out, tt.out) {
				t.Fatalf("exit %d, stdout %q (stderr %q); want exit %d, stdout with %q", st, out, errOut, tt.status, tt.out)
			}
		})
	}
	if after, _ := os.ReadFile(seedFile); string(after) != string(before) {
		t.Fatal("keys new replaced an existing seed file")
	}
}

// TestKeysName: keys new and keys pub with --name give the trust-file
// line "<public key> <name>", which the trust files read back with the
// name; a name with a # or a line break is a usage error and no key is
// written.
func TestKeysName(t *testing.T) {
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "alice.nk")
	st, out, errOut := runCLI("keys", "new", "--out", seedFile, "--name", "Alice  Liddell")
	if st != exitOK {
		t.Fatalf("keys new --name: exit %d: %s", st, errOut)
	}
	pub := strings.TrimSpace(out)
	if !strings.Contains(errOut, pub+" Alice Liddell") {
		t.Fatalf("keys new --name does not show the trust line: %s", errOut)
	}
	st, out, _ = runCLI("keys", "pub", "--key", seedFile, "--name", "Alice Liddell")
	if st != exitOK || strings.TrimSpace(out) != pub+" Alice Liddell" {
		t.Fatalf("keys pub --name: exit %d, %q", st, out)
	}
	_, names, err := recovery.ParseNamedKeys([]byte(out))
	if err != nil || names.Name(pub) != "Alice Liddell" {
		t.Fatalf("the trust line does not read back: %v %v", names, err)
	}
	for _, bad := range []string{"eve # admin", "eve\nU123"} {
		f := filepath.Join(dir, "bad.nk")
		if st, _, _ := runCLI("keys", "new", "--out", f, "--name", bad); st != exitUsage {
			t.Errorf("keys new --name %q: exit %d, want 2", bad, st)
		}
		if _, err := os.Stat(f); err == nil {
			t.Errorf("keys new --name %q wrote a key", bad)
		}
	}
}
