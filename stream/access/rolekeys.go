package access

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/nats-io/nkeys"
)

// KeyDir is a directory of role credentials, as `jingwei auth init` writes
// it:
//
//	<dir>/<role>.nk     the role's nkey user seed (0600), for --nkey
//	<dir>/<role>.creds  the role's user JWT and seed (0600), operator mode
//	                    only, written by IssueRoleCreds, for --creds
//	<dir>/planner.nk    the plan-signing key, an nkey user seed (0600)
//	<dir>/planners      the plan signers tool workers trust: one public
//	                    key per line, # comments (0644)
//	<dir>/tenants/<tenant>/<agent>.nk
//	                    a tenant's agent's nkey user seed (0600, its
//	                    directories 0700), written by AddTenantAgent;
//	                    <agent>.creds next to it in operator mode
//
// and, for operator mode, written by IssueRoleCreds:
//
//	<dir>/<ACCOUNT>.account.nk   each account's seed (0600): JINGWEI,
//	                             JINGWEI_AGENT, JINGWEI_REVIEWER,
//	                             JINGWEI_HOST (RoleConfig.AccountName),
//	                             JINGWEI_TENANT_<tenant> per tenant
//	<dir>/<ACCOUNT>.account.jwt  each account's JWT, signed by the
//	                             operator (0644)
//	<dir>/resolver-preload.conf  the account JWTs as entries of a
//	                             nats-server resolver_preload block
//	                             (0644)
//
// The directory itself is 0700. A directory or file that other users could
// read or change is refused with ErrInsecureFile. The zero value names the
// current directory.
type KeyDir string

// PlannerKeyFile and PlannersFile are the names of the plan-signing key and
// the trusted plan signers list inside a KeyDir.
const (
	PlannerKeyFile = "planner.nk"
	PlannersFile   = "planners"
)

// maxSeedFileBytes bounds a seed or creds file read (a creds file is a few
// KiB).
const maxSeedFileBytes = 64 << 10

func (d KeyDir) path(name string) string { return filepath.Join(string(d), name) }

// SeedFile returns <dir>/<role>.nk.
func (d KeyDir) SeedFile(r Role) string { return d.path(string(r) + ".nk") }

// CredsFile returns <dir>/<role>.creds.
func (d KeyDir) CredsFile(r Role) string { return d.path(string(r) + ".creds") }

// AccountSeedFile returns <dir>/<account>.account.nk, the seed of the
// account named account (RoleConfig.AccountName), operator mode only.
func (d KeyDir) AccountSeedFile(account string) string { return d.path(account + ".account.nk") }

// AccountJWTFile returns <dir>/<account>.account.jwt.
func (d KeyDir) AccountJWTFile(account string) string { return d.path(account + ".account.jwt") }

// ResolverPreloadFile returns <dir>/resolver-preload.conf.
func (d KeyDir) ResolverPreloadFile() string { return d.path("resolver-preload.conf") }

// PlannerFile returns <dir>/planner.nk.
func (d KeyDir) PlannerFile() string { return d.path(PlannerKeyFile) }

// PlannersFile returns <dir>/planners.
func (d KeyDir) PlannersFile() string { return d.path(PlannersFile) }

// KeyFile is one key of a KeyDir.
type KeyFile struct {
	// Role is the role the key is for; empty for the planner key.
	Role Role `json:"role,omitempty"`
	// Path is the seed file.
	Path string `json:"seed_file"`
	// PublicKey is the nkey public key ("U…").
	PublicKey string `json:"public_key"`
	// Created is set when Init wrote the file (it did not exist).
	Created bool `json:"created"`
}

// KeyDirInit is what KeyDir.Init found and wrote.
type KeyDirInit struct {
	// Dir is the directory.
	Dir string `json:"dir"`
	// Roles holds one key per role, in the order of Roles.
	Roles []KeyFile `json:"roles"`
	// Planner is the plan-signing key.
	Planner KeyFile `json:"planner"`
	// Planners is the trusted plan signers file; PlannersCreated is set
	// when Init wrote it, PlannerTrusted when it lists Planner's key.
	Planners        string `json:"planners_file"`
	PlannersCreated bool   `json:"planners_created"`
	PlannerTrusted  bool   `json:"planner_trusted"`
}

// Init creates the directory (0700) and whatever keys are missing: one
// nkey user seed per role, the planner key, and the planners file listing
// the planner's public key. Existing keys are checked and kept, never
// replaced; an existing planners file is left as it is (PlannerTrusted says
// whether it lists the planner key). It returns ErrInsecureFile for a
// directory or file others can read or write, and is safe to run again.
func (d KeyDir) Init() (KeyDirInit, error) {
	dir := string(d)
	if dir == "" {
		dir = "."
	}
	out := KeyDirInit{Dir: dir, Planners: d.PlannersFile()}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return out, fmt.Errorf("stream: credentials directory: %w", err)
	}
	if err := checkDir(dir); err != nil {
		return out, err
	}
	for _, r := range Roles {
		kf, err := ensureSeed(d.SeedFile(r))
		if err != nil {
			return out, err
		}
		kf.Role = r
		out.Roles = append(out.Roles, kf)
	}
	var err error
	if out.Planner, err = ensureSeed(d.PlannerFile()); err != nil {
		return out, err
	}
	text := "# jingwei plan signers: tool workers accept plans signed by these keys.\n# One nkey public key per line.\n" + out.Planner.PublicKey + "\n"
	created, err := writeNewFile(out.Planners, []byte(text), 0o644)
	if err != nil {
		return out, err
	}
	out.PlannersCreated = created
	keys, err := d.Planners()
	if err != nil {
		return out, err
	}
	for _, k := range keys {
		if k == out.Planner.PublicKey {
			out.PlannerTrusted = true
		}
	}
	return out, nil
}

// ensureSeed loads the user seed at path, or creates one if there is none.
func ensureSeed(path string) (KeyFile, error) { return ensureKey(path, nkeys.PrefixByteUser) }

// ensureKey loads the seed of kind (nkeys.PrefixByteUser or
// PrefixByteAccount) at path, or creates one if there is none.
func ensureKey(path string, kind nkeys.PrefixByte) (KeyFile, error) {
	kp, err := readSeedOf(path, kind)
	if err == nil {
		pub, _ := kp.PublicKey()
		return KeyFile{Path: path, PublicKey: pub}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return KeyFile{}, err
	}
	kp, err = nkeys.CreatePair(kind)
	if err != nil {
		return KeyFile{}, fmt.Errorf("stream: create key: %w", err)
	}
	seed, _ := kp.Seed()
	created, err := writeNewFile(path, append(seed, '\n'), 0o600)
	if err != nil {
		return KeyFile{}, err
	}
	if !created { // another process wrote it first: use theirs
		return ensureKey(path, kind)
	}
	pub, _ := kp.PublicKey()
	return KeyFile{Path: path, PublicKey: pub, Created: true}, nil
}

// writeNewFile creates path with mode and writes b, fsynced; it returns
// false (and writes nothing) if the file exists.
func writeNewFile(path string, b []byte, mode os.FileMode) (bool, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stream: create %s: %w", path, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return false, fmt.Errorf("stream: write %s: %w", path, err)
	}
	return true, nil
}

// KeyPair loads the role's nkey user seed (<dir>/<role>.nk). Errors:
// ErrUnknownRole, ErrInsecureFile, fs.ErrNotExist (wrapped) when the key
// was never created.
func (d KeyDir) KeyPair(r Role) (nkeys.KeyPair, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRole, r)
	}
	if err := checkDir(string(d)); err != nil {
		return nil, err
	}
	return readUserSeed(d.SeedFile(r))
}

// PublicKey returns the role's public key ("U…"), read from its seed.
func (d KeyDir) PublicKey(r Role) (string, error) {
	kp, err := d.KeyPair(r)
	if err != nil {
		return "", err
	}
	return kp.PublicKey()
}

// PublicKeys returns the public key of every role. A missing or insecure
// seed file is an error.
func (d KeyDir) PublicKeys() (map[Role]string, error) {
	out := make(map[Role]string, len(Roles))
	for _, r := range Roles {
		pub, err := d.PublicKey(r)
		if err != nil {
			return nil, err
		}
		out[r] = pub
	}
	return out, nil
}

// PlannerKeyPair loads the plan-signing key (<dir>/planner.nk).
func (d KeyDir) PlannerKeyPair() (nkeys.KeyPair, error) {
	if err := checkDir(string(d)); err != nil {
		return nil, err
	}
	return readUserSeed(d.PlannerFile())
}

// Planners returns the public keys listed in <dir>/planners (blank lines
// and # comments skipped). A line that is not an nkey user public key, or a
// file others can write, is an error.
func (d KeyDir) Planners() ([]string, error) {
	b, err := readChecked(d.PlannersFile(), 0o022, "644")
	if err != nil {
		return nil, err
	}
	var keys []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !nkeys.IsValidPublicUserKey(line) {
			return nil, fmt.Errorf("%w: %s line %d: not an nkey user public key: %q", ErrBadKey, d.PlannersFile(), n, line)
		}
		keys = append(keys, line)
	}
	return keys, sc.Err()
}

// ReadSeedFile reads an nkey seed of any kind (user, account, operator)
// from path: a bare seed or a decorated one (a .creds file). It returns
// ErrInsecureFile if others can read or write the file.
func ReadSeedFile(path string) (nkeys.KeyPair, error) {
	b, err := readChecked(path, 0o077, "600")
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
	if err != nil {
		kp, err = nkeys.ParseDecoratedNKey(b)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s holds no nkey seed: %v", ErrBadKey, path, err)
	}
	return kp, nil
}

func readUserSeed(path string) (nkeys.KeyPair, error) { return readSeedOf(path, nkeys.PrefixByteUser) }

// readSeedOf reads a seed of kind (user or account) from path.
func readSeedOf(path string, kind nkeys.PrefixByte) (nkeys.KeyPair, error) {
	kp, err := ReadSeedFile(path)
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	ok := err == nil && (kind == nkeys.PrefixByteUser && nkeys.IsValidPublicUserKey(pub) ||
		kind == nkeys.PrefixByteAccount && nkeys.IsValidPublicAccountKey(pub))
	if !ok {
		want := "an nkey user seed (want SU…)"
		if kind == nkeys.PrefixByteAccount {
			want = "an nkey account seed (want SA…)"
		}
		return nil, fmt.Errorf("%w: %s is not %s", ErrBadKey, path, want)
	}
	return kp, nil
}

// readChecked reads a file after checking, on the open file, that none of
// the bad permission bits are set.
func readChecked(path string, bad os.FileMode, fix string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadKey, path)
	}
	if insecure(st.Mode(), bad) {
		return nil, fmt.Errorf("%w: %s has mode %04o; fix it with: chmod %s %s", ErrInsecureFile, path, st.Mode().Perm(), fix, path)
	}
	return io.ReadAll(io.LimitReader(f, maxSeedFileBytes))
}

func checkDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("stream: credentials directory: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: credentials directory %s is not a directory", ErrBadKey, dir)
	}
	if insecure(st.Mode(), 0o077) {
		return fmt.Errorf("%w: directory %s has mode %04o; fix it with: chmod 700 %s", ErrInsecureFile, dir, st.Mode().Perm(), dir)
	}
	return nil
}

// insecure reports bad permission bits; Windows has none to check.
func insecure(mode, bad os.FileMode) bool {
	return runtime.GOOS != "windows" && mode.Perm()&bad != 0
}
