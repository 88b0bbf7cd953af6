package access_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// testOperator is an operator with a system account.
type testOperator struct {
	signer    nkeys.KeyPair // the operator key, or its signing key
	jwt       string        // the operator JWT
	sys, sysJ string        // the system account's public key and JWT
}

// newTestOperator makes an operator, its JWT and a system account; with
// signingKey the operator JWT lists a signing key and that key signs.
func newTestOperator(t *testing.T, signingKey bool) testOperator {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "jingwei-test-operator"
	oc.SystemAccount = spub
	op := testOperator{signer: okp, sys: spub}
	if signingKey {
		sk, _ := nkeys.CreateOperator()
		pub, _ := sk.PublicKey()
		oc.SigningKeys.Add(pub)
		op.signer = sk
	}
	var err error
	if op.jwt, err = oc.Encode(okp); err != nil {
		t.Fatal(err)
	}
	sc := jwt.NewAccountClaims(spub)
	sc.Name = "SYS"
	if op.sysJ, err = sc.Encode(okp); err != nil {
		t.Fatal(err)
	}
	return op
}

// startOperatorServer starts a nats-server in operator mode from a
// configuration file that trusts the operator and includes the accounts'
// resolver_preload entries IssueRoleCreds wrote, as an operator would set
// it up. It returns the client URL.
func startOperatorServer(t *testing.T, op testOperator, preloadFile string) string {
	t.Helper()
	conf := fmt.Sprintf(`listen: "127.0.0.1:-1"
server_name: jw-operator-test
jetstream {
  store_dir: %q
}
operator: %q
system_account: %s
resolver: MEMORY
resolver_preload {
  %s: %q
  include %q
}
`, t.TempDir(), op.jwt, op.sys, op.sys, op.sysJ, filepath.Base(preloadFile))
	// Includes are relative to the configuration file.
	path := filepath.Join(filepath.Dir(preloadFile), "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server rejects the configuration: %v\n%s", err, conf)
	}
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return s.ClientURL()
}

// TestRoleCredsOperatorMode issues the accounts (signed by the operator or
// one of its signing keys) and every role's creds file, starts a real
// operator-mode server from the files, connects with them through
// stream.Connect (Creds), and runs the role check against it.
func TestRoleCredsOperatorMode(t *testing.T) {
	for _, tc := range []struct {
		name       string
		signingKey bool
	}{{"operator key", false}, {"operator signing key", true}} {
		t.Run(tc.name, func(t *testing.T) {
			op := newTestOperator(t, tc.signingKey)
			dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
			if _, err := dir.Init(); err != nil {
				t.Fatal(err)
			}
			rc := access.RoleConfig{}
			got, err := dir.IssueRoleCreds(access.CredsConfig{Operator: op.signer, Expires: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Users) != len(access.Roles) || len(got.Accounts) != 4 {
				t.Fatalf("%d creds files, %d accounts", len(got.Users), len(got.Accounts))
			}
			accountKey := map[string]string{}
			for _, a := range got.Accounts {
				accountKey[a.Name] = a.PublicKey
				if mode(t, a.SeedFile) != 0o600 || mode(t, a.JWTFile) != 0o644 || !a.SeedCreated {
					t.Errorf("%s: seed %04o, jwt %04o, created %v", a.Name, mode(t, a.SeedFile), mode(t, a.JWTFile), a.SeedCreated)
				}
				b, _ := os.ReadFile(a.JWTFile)
				ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatal(err)
				}
				spec := rc.Accounts()[slices.IndexFunc(rc.Accounts(), func(s access.AccountSpec) bool { return s.Name == a.Name })]
				if ac.Subject != a.PublicKey || ac.Name != a.Name || ac.Limits.JetStreamLimits.IsUnlimited() != spec.JetStream ||
					len(ac.Exports) != len(spec.Exports) || len(ac.Imports) != len(spec.Imports) {
					t.Errorf("%s: claims %s js=%+v exports %d imports %d", a.Name, ac.Name, ac.Limits.JetStreamLimits, len(ac.Exports), len(ac.Imports))
				}
				for _, e := range ac.Exports {
					if !e.TokenReq {
						t.Errorf("%s: public export %s", a.Name, e.Subject)
					}
				}
				for _, im := range ac.Imports {
					if im.Token == "" || im.Account != got.Accounts[0].PublicKey {
						t.Errorf("%s: import %s from %s without activation", a.Name, im.Subject, im.Account)
					}
				}
				t.Logf("account %-17s %s: %5d bytes, %d exports, %d imports", a.Name, a.PublicKey, a.JWTBytes, len(ac.Exports), len(ac.Imports))
			}
			for _, f := range got.Users {
				t.Logf("user %-9s in %-17s %4d bytes", f.Role, f.Account, f.JWTBytes)
				if f.JWTBytes > access.SafeJWTBytes {
					t.Errorf("%s: JWT of %d bytes: a default server refuses the CONNECT", f.Role, f.JWTBytes)
				}
				if mode(t, f.Path) != 0o600 || f.Path != dir.CredsFile(f.Role) || f.Account != rc.AccountName(f.Role) {
					t.Errorf("%s: %s mode %04o account %s", f.Role, f.Path, mode(t, f.Path), f.Account)
				}
				b, _ := os.ReadFile(f.Path)
				tok, err := jwt.ParseDecoratedJWT(b)
				if err != nil {
					t.Fatal(err)
				}
				uc, err := jwt.DecodeUserClaims(tok)
				if err != nil {
					t.Fatal(err)
				}
				want := rc.JWTPermissions(f.Role)
				if uc.Subject != f.PublicKey || uc.Issuer != accountKey[f.Account] || !uc.Tags.Contains("jingwei-role:"+string(f.Role)) ||
					!sameList(uc.Pub.Allow, want.Pub.Allow) || !sameList(uc.Sub.Deny, want.Sub.Deny) || (uc.Resp == nil) != (want.Resp == nil) {
					t.Errorf("%s: claims issuer %s %+v", f.Role, uc.Issuer, uc.Permissions)
				}
				if pub, _ := dir.PublicKey(f.Role); pub != uc.Subject {
					t.Errorf("%s: creds for %s, role key is %s", f.Role, uc.Subject, pub)
				}
			}
			url := startOperatorServer(t, op, got.PreloadFile)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			admin, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, Creds: dir.CredsFile(access.RoleAdmin)})
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			js, _ := jetstream.New(admin)
			if _, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{}); err != nil {
				t.Fatal(err)
			}
			rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: url, Dir: dir, Creds: true})
			if err != nil {
				t.Fatal(err)
			}
			checkOK(t, rep)
			if !rep.OK {
				t.Fatal("role check failed in operator mode")
			}
			// The plain nkey seed is no user here: only the JWT is.
			if _, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, NKeySeedFile: dir.SeedFile(access.RoleAgent), ConnectTimeout: time.Second}); err == nil {
				t.Error("nkey without a JWT accepted in operator mode")
			}
			// Issued again: the account keys stay, so the creds of a
			// client still connected keep working.
			again, err := dir.IssueRoleCreds(access.CredsConfig{Operator: op.signer, Roles: []access.Role{access.RoleAgent}})
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range again.Accounts {
				if a.PublicKey != got.Accounts[i].PublicKey || a.SeedCreated {
					t.Errorf("%s: account key changed on reissue", a.Name)
				}
			}
			if len(again.Users) != 1 || again.Users[0].Role != access.RoleAgent {
				t.Errorf("reissue for the agent only: %+v", again.Users)
			}
			agent, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, Creds: dir.CredsFile(access.RoleAgent)})
			if err != nil {
				t.Fatalf("reissued agent creds: %v", err)
			}
			defer agent.Close()
			ajs, _ := jetstream.New(agent)
			if _, err := ajs.Publish(ctx, "jw.requests.s-1", []byte(`{"v":1}`)); err != nil {
				t.Errorf("agent request through its import: %v", err)
			}
		})
	}
}

// TestRoleCredsUntrustedOperator: accounts signed by an operator the server
// does not trust give creds the server refuses; a creds file others can
// read is refused before connecting; keys of the wrong kind are refused.
func TestRoleCredsUntrustedOperator(t *testing.T) {
	op := newTestOperator(t, false)
	good := access.KeyDir(filepath.Join(t.TempDir(), "good"))
	if _, err := good.Init(); err != nil {
		t.Fatal(err)
	}
	issued, err := good.IssueRoleCreds(access.CredsConfig{Operator: op.signer, Roles: []access.Role{access.RoleAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	url := startOperatorServer(t, op, issued.PreloadFile)

	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	rogue, _ := nkeys.CreateOperator()
	if _, err := dir.IssueRoleCreds(access.CredsConfig{Operator: rogue, Roles: []access.Role{access.RoleAdmin}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, Creds: dir.CredsFile(access.RoleAdmin), ConnectTimeout: time.Second})
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("rogue operator's creds: %v", err)
	}
	os.Chmod(dir.CredsFile(access.RoleAdmin), 0o644)
	rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: url, Dir: dir, Creds: true, Roles: []access.Role{access.RoleAdmin}})
	if err == nil || !errors.Is(err, access.ErrInsecureFile) {
		t.Errorf("insecure creds: %v %+v", err, rep)
	}
	// A user or account key where an operator key belongs.
	ukp, _ := nkeys.CreateUser()
	akp, _ := nkeys.CreateAccount()
	for _, kp := range []nkeys.KeyPair{ukp, akp, nil} {
		if _, err := dir.IssueRoleCreds(access.CredsConfig{Operator: kp}); err == nil || !strings.Contains(err.Error(), "operator") {
			t.Errorf("%v as operator: %v", kp, err)
		}
	}
	// A user seed where an account seed is kept.
	seed, _ := ukp.Seed()
	if err := os.WriteFile(dir.AccountSeedFile("JINGWEI"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dir.IssueRoleCreds(access.CredsConfig{Operator: rogue}); !errors.Is(err, access.ErrBadKey) {
		t.Errorf("user seed as account seed: %v", err)
	}
}
