package access_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream/access"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestKeyDirInit(t *testing.T) {
	dir := access.KeyDir(filepath.Join(t.TempDir(), "a", "keys"))
	got, err := dir.Init()
	if err != nil {
		t.Fatal(err)
	}
	if m := mode(t, string(dir)); m != 0o700 {
		t.Errorf("dir mode %04o, want 0700", m)
	}
	if len(got.Roles) != len(access.Roles) {
		t.Fatalf("%d role keys", len(got.Roles))
	}
	seen := map[string]bool{}
	for i, kf := range got.Roles {
		if kf.Role != access.Roles[i] || !kf.Created || kf.Path != dir.SeedFile(kf.Role) {
			t.Errorf("role key %d: %+v", i, kf)
		}
		if m := mode(t, kf.Path); m != 0o600 {
			t.Errorf("%s mode %04o, want 0600", kf.Path, m)
		}
		if !nkeys.IsValidPublicUserKey(kf.PublicKey) || seen[kf.PublicKey] {
			t.Errorf("%s: public key %q (duplicate %v)", kf.Role, kf.PublicKey, seen[kf.PublicKey])
		}
		seen[kf.PublicKey] = true
		pub, err := dir.PublicKey(kf.Role)
		if err != nil || pub != kf.PublicKey {
			t.Errorf("PublicKey(%s) = %q, %v; want %q", kf.Role, pub, err, kf.PublicKey)
		}
	}
	if !got.Planner.Created || mode(t, dir.PlannerFile()) != 0o600 || seen[got.Planner.PublicKey] {
		t.Errorf("planner %+v mode %04o", got.Planner, mode(t, dir.PlannerFile()))
	}
	if !got.PlannersCreated || !got.PlannerTrusted || mode(t, dir.PlannersFile()) != 0o644 {
		t.Errorf("planners file: %+v mode %04o", got, mode(t, dir.PlannersFile()))
	}
	// The planners file is what tool workers (and the reviewer trust of
	// recover --trust-reviewers) parse: one key per line, # comments.
	b, _ := os.ReadFile(dir.PlannersFile())
	trusted, err := recovery.ParseTrustedKeys(b)
	if err != nil || !trusted.Has(got.Planner.PublicKey) || len(trusted) != 1 {
		t.Errorf("planners file %q: %v %v", b, trusted, err)
	}
	kp, err := dir.PlannerKeyPair()
	if pub, _ := kp.PublicKey(); err != nil || pub != got.Planner.PublicKey {
		t.Errorf("PlannerKeyPair: %v %v", pub, err)
	}

	// Again: nothing is replaced.
	again, err := dir.Init()
	if err != nil {
		t.Fatal(err)
	}
	for i, kf := range again.Roles {
		if kf.Created || kf.PublicKey != got.Roles[i].PublicKey {
			t.Errorf("second init replaced %s: %+v", kf.Role, kf)
		}
	}
	if again.Planner.Created || again.PlannersCreated || again.Planner.PublicKey != got.Planner.PublicKey {
		t.Errorf("second init: %+v", again)
	}

	// A missing key is added, the others kept.
	os.Remove(dir.SeedFile(access.RoleHost))
	third, err := dir.Init()
	if err != nil {
		t.Fatal(err)
	}
	for _, kf := range third.Roles {
		if (kf.Role == access.RoleHost) != kf.Created {
			t.Errorf("third init: %s created=%v", kf.Role, kf.Created)
		}
	}
}

func TestKeyDirRefusesInsecureFiles(t *testing.T) {
	fresh := func(t *testing.T) access.KeyDir {
		dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
		if _, err := dir.Init(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tc := range []struct {
		name string
		file func(access.KeyDir) string
		mode os.FileMode
		fix  string
		use  func(access.KeyDir) error
	}{
		{"world-readable dir", func(d access.KeyDir) string { return string(d) }, 0o755, "chmod 700 ", func(d access.KeyDir) error { _, err := d.Init(); return err }},
		{"group-writable dir", func(d access.KeyDir) string { return string(d) }, 0o720, "chmod 700 ", func(d access.KeyDir) error { _, err := d.KeyPair(access.RoleAgent); return err }},
		{"group-readable seed", func(d access.KeyDir) string { return d.SeedFile(access.RoleWorker) }, 0o640, "chmod 600 ", func(d access.KeyDir) error { _, err := d.KeyPair(access.RoleWorker); return err }},
		{"world-readable seed at init", func(d access.KeyDir) string { return d.SeedFile(access.RoleAdmin) }, 0o604, "chmod 600 ", func(d access.KeyDir) error { _, err := d.Init(); return err }},
		{"world-readable planner", func(d access.KeyDir) string { return d.PlannerFile() }, 0o644, "chmod 600 ", func(d access.KeyDir) error { _, err := d.PlannerKeyPair(); return err }},
		{"group-writable planners list", func(d access.KeyDir) string { return d.PlannersFile() }, 0o664, "chmod 644 ", func(d access.KeyDir) error { _, err := d.Planners(); return err }},
		{"seed for PublicKeys", func(d access.KeyDir) string { return d.SeedFile(access.RoleRecoverer) }, 0o660, "chmod 600 ", func(d access.KeyDir) error { _, err := d.PublicKeys(); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := fresh(t)
			f := tc.file(d)
			if err := os.Chmod(f, tc.mode); err != nil {
				t.Fatal(err)
			}
			err := tc.use(d)
			if !errors.Is(err, access.ErrInsecureFile) {
				t.Fatalf("err = %v, want ErrInsecureFile", err)
			}
			if !strings.Contains(err.Error(), tc.fix+f) {
				t.Errorf("error %q does not say %q", err, tc.fix+f)
			}
		})
	}
}

func TestKeyDirBadKeys(t *testing.T) {
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.KeyPair(access.RoleAgent); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := dir.KeyPair("superuser"); !errors.Is(err, access.ErrUnknownRole) {
		t.Errorf("unknown role: %v", err)
	}
	// An account seed where a user seed belongs.
	akp, _ := nkeys.CreateAccount()
	seed, _ := akp.Seed()
	os.WriteFile(dir.SeedFile(access.RoleHost), seed, 0o600)
	if _, err := dir.KeyPair(access.RoleHost); err == nil || !strings.Contains(err.Error(), "not an nkey user seed") {
		t.Errorf("account seed: %v", err)
	}
	if _, err := dir.Init(); err == nil {
		t.Error("Init accepted an account seed as a role key")
	}
	os.WriteFile(dir.SeedFile(access.RoleAgent), []byte("garbage\n"), 0o600)
	if _, err := dir.KeyPair(access.RoleAgent); err == nil {
		t.Error("garbage seed accepted")
	}
	os.WriteFile(dir.PlannersFile(), []byte("# ok\nUNOTAKEY\n"), 0o644)
	if _, err := dir.Planners(); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad planners line: %v", err)
	}
	// ReadSeedFile accepts seeds of any kind (jingwei auth creds --operator-seed).
	f := filepath.Join(string(dir), "account.nk")
	os.WriteFile(f, seed, 0o600)
	kp, err := access.ReadSeedFile(f)
	if pub, _ := kp.PublicKey(); err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		t.Errorf("ReadSeedFile: %v %v", pub, err)
	}
}
