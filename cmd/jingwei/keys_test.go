package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
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
