package stream_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/stream"
)

// operatorServer is an embedded server in operator mode: a trusted operator,
// a system account, and one account with JetStream, all in a memory
// resolver. It returns the server and the account's key pair.
func operatorServer(t *testing.T) (*stream.Embedded, nkeys.KeyPair, nkeys.KeyPair) {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "jingwei-test-operator"
	oc.SystemAccount = spub
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	op, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	sc := jwt.NewAccountClaims(spub)
	sc.Name = "SYS"
	sjwt, err := sc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	// A signing key of the account, the usual way to issue users.
	sigkp, _ := nkeys.CreateAccount()
	sigpub, _ := sigkp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "JINGWEI"
	ac.SigningKeys.Add(sigpub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	res := &server.MemAccResolver{}
	if err := res.Store(spub, sjwt); err != nil {
		t.Fatal(err)
	}
	if err := res.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := stream.StartEmbedded(ctx, stream.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: stream.SyncInterval, Options: func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{op}
		o.AccountResolver = res
		o.SystemAccount = spub
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e, akp, sigkp
}

// TestRoleCredsOperatorMode issues every role's creds file with the role's
// permissions in its user JWT, connects with them through stream.Connect
// (Creds), and runs the role check against a real operator-mode server.
func TestRoleCredsOperatorMode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		signingKy bool
	}{{"account key", false}, {"account signing key", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e, akp, sigkp := operatorServer(t)
			dir := stream.KeyDir(filepath.Join(t.TempDir(), "keys"))
			if _, err := dir.Init(); err != nil {
				t.Fatal(err)
			}
			cfg := stream.CredsConfig{Account: akp, Expires: time.Hour}
			if tc.signingKy {
				apub, _ := akp.PublicKey()
				cfg = stream.CredsConfig{Account: sigkp, IssuerAccount: apub}
			}
			files, err := dir.IssueRoleCreds(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != len(stream.Roles) {
				t.Fatalf("%d creds files", len(files))
			}
			for _, f := range files {
				if f.JWTBytes > stream.SafeJWTBytes {
					t.Errorf("%s: JWT of %d bytes: a default server refuses the CONNECT", f.Role, f.JWTBytes)
				}
				if mode(t, f.Path) != 0o600 || f.Path != dir.CredsFile(f.Role) {
					t.Errorf("%s: %s mode %04o", f.Role, f.Path, mode(t, f.Path))
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
				want := stream.RoleConfig{}.JWTPermissions(f.Role)
				if uc.Subject != f.PublicKey || !uc.Tags.Contains("jingwei-role:"+string(f.Role)) ||
					!sameList(uc.Pub.Allow, want.Pub.Allow) || !sameList(uc.Sub.Deny, want.Sub.Deny) || (uc.Resp == nil) != (want.Resp == nil) {
					t.Errorf("%s: claims %+v", f.Role, uc.Permissions)
				}
				if pub, _ := dir.PublicKey(f.Role); pub != uc.Subject {
					t.Errorf("%s: creds for %s, role key is %s", f.Role, uc.Subject, pub)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			admin, err := stream.Connect(ctx, stream.ConnectConfig{URL: e.ClientURL(), Creds: dir.CredsFile(stream.RoleAdmin)})
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			js, _ := jetstream.New(admin)
			topo, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{})
			if err != nil {
				t.Fatal(err)
			}
			si, _ := topo.Events.Info(ctx)
			c := si.Config
			c.AllowDirect = true
			if _, err := js.UpdateStream(ctx, c); err != nil {
				t.Fatal(err)
			}
			rep, err := stream.CheckRoles(ctx, stream.CheckConfig{URL: e.ClientURL(), Dir: dir, Creds: true})
			if err != nil {
				t.Fatal(err)
			}
			checkOK(t, rep)
			if !rep.OK {
				t.Fatal("role check failed in operator mode")
			}
			// The plain nkey seed is no user here: only the JWT is.
			if _, err := stream.Connect(ctx, stream.ConnectConfig{URL: e.ClientURL(), NKeySeedFile: dir.SeedFile(stream.RoleAgent), ConnectTimeout: time.Second}); err == nil {
				t.Error("nkey without a JWT accepted in operator mode")
			}
		})
	}
}

// TestRoleCredsUntrustedAccount: creds signed by an account the operator
// does not know are refused; a creds file others can read is refused before
// connecting.
func TestRoleCredsUntrustedAccount(t *testing.T) {
	e, _, _ := operatorServer(t)
	dir := stream.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	rogue, _ := nkeys.CreateAccount()
	if _, err := dir.IssueRoleCreds(stream.CredsConfig{Account: rogue, Roles: []stream.Role{stream.RoleAdmin}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err := stream.Connect(ctx, stream.ConnectConfig{URL: e.ClientURL(), Creds: dir.CredsFile(stream.RoleAdmin), ConnectTimeout: time.Second})
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("rogue account's creds: %v", err)
	}
	os.Chmod(dir.CredsFile(stream.RoleAdmin), 0o644)
	rep, err := stream.CheckRoles(ctx, stream.CheckConfig{URL: e.ClientURL(), Dir: dir, Creds: true, Roles: []stream.Role{stream.RoleAdmin}})
	if err == nil || !errors.Is(err, stream.ErrInsecureFile) {
		t.Errorf("insecure creds: %v %+v", err, rep)
	}
	// A user key where an account key belongs.
	ukp, _ := nkeys.CreateUser()
	if _, err := dir.IssueRoleCreds(stream.CredsConfig{Account: ukp}); err == nil || !strings.Contains(err.Error(), "account") {
		t.Errorf("user key as account: %v", err)
	}
}
