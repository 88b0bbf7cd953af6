// Package keyfile holds a person's signing key in a file, as jingwei keys
// makes it and review, approve and deny read it: an nkey user seed
// written 0600 and never replaced, and the trust-file line that names its
// public key.
package keyfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
)

// MaxBytes bounds a key file read; a seed is 58 bytes.
const MaxBytes = 64 << 10

// Output is what keys new and keys pub print with --json.
type Output struct {
	PublicKey string `json:"public_key"`
	SeedFile  string `json:"seed_file"`
	// TrustLine is "<public key> <name>" with --name.
	TrustLine string `json:"trust_line,omitempty"`
}

// TrustLine returns the trust-file line of pub named name ("" without a
// name), or an error for a name a trust file cannot hold.
func TrustLine(pub, name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", nil
	case strings.ContainsAny(name, "#\r\n"):
		return "", fmt.Errorf("--name %q: a name holds no # and no line break", name)
	case len(name) > recovery.MaxKeyNameBytes:
		return "", fmt.Errorf("--name: at most %d bytes", recovery.MaxKeyNameBytes)
	}
	line := pub + " " + strings.Join(strings.Fields(name), " ")
	if _, names, err := recovery.ParseNamedKeys([]byte(line)); err != nil || names.Name(pub) == "" {
		return "", fmt.Errorf("--name %q: not a name a trust file can hold: %v", name, err)
	}
	return line, nil
}

// WriteSecret creates name with permissions 0600 and writes b; it never
// replaces an existing file, and removes what it created when the write
// fails.
func WriteSecret(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s already exists; choose another --out or remove it first", name)
	}
	if err != nil {
		return fmt.Errorf("cannot create key file: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(name)
		return fmt.Errorf("cannot write key file: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("cannot write key file: %w", err)
	}
	return nil
}

// Load reads an nkey user seed from a file: a bare seed ("SU…", as keys
// new writes it) or a decorated one (a .creds or .nk file).
func Load(name string) (nkeys.KeyPair, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot open key file: %w (create one with: jingwei keys new --out %s)", err, name)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes))
	if err != nil {
		return nil, fmt.Errorf("cannot read key file %s: %w", name, err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
	if err != nil {
		kp, err = nkeys.ParseDecoratedNKey(b)
	}
	if err != nil {
		return nil, fmt.Errorf("key file %s holds no nkey seed: %v", name, err)
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return nil, fmt.Errorf("key file %s is not an nkey user seed (want SU…; create one with jingwei keys new)", name)
	}
	return kp, nil
}
