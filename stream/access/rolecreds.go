package access

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// CredsConfig configures KeyDir.IssueRoleCreds.
type CredsConfig struct {
	// Operator signs the account JWTs: the operator's own key pair or one
	// of its signing keys (a seed starting SO…). The server must trust
	// that operator (its operator JWT, listing the signing key if one is
	// used). Required.
	Operator nkeys.KeyPair
	// Subjects names the prefixes of the permissions and the accounts. The
	// zero value is the defaults.
	Subjects RoleConfig
	// Roles are the roles to issue user credentials for. Nil means every
	// role. The account JWTs are issued for every account either way (the
	// trusted account's exports name the others).
	Roles []Role
	// Expires is how long the user credentials are valid from now. Zero:
	// they never expire. The account JWTs never expire.
	Expires time.Duration
	// JetStream are the trusted account's JetStream limits. Nil: no limit
	// (-1 for memory, disk, streams and consumers).
	JetStream *jwt.JetStreamLimits
}

// SafeJWTBytes is the largest user JWT a server with the default
// max_control_line (4 KiB, which bounds the CONNECT line that carries the
// JWT) takes with room to spare for the rest of the line: nats-server
// 2.15 took JWTs up to about 3,800 bytes from nats.go with a 28-byte
// connection name. A larger one needs max_control_line raised on the
// server (e.g. max_control_line: 16KB). Account JWTs are not sent on the
// CONNECT line and have no such bound.
const SafeJWTBytes = 3750

// CredsFile is one user creds file IssueRoleCreds wrote.
type CredsFile struct {
	// Role is the role.
	Role Role `json:"role"`
	// Tenant is the tenant of a tenant's agent (Role is RoleAgent); "" for
	// the roles' users.
	Tenant string `json:"tenant,omitempty"`
	// Account is the name of the role's account.
	Account string `json:"account"`
	// Path is <dir>/<role>.creds, or
	// <dir>/tenants/<tenant>/<agent>.creds for a tenant's agent.
	Path string `json:"creds_file"`
	// PublicKey is the user's (the role's) public key.
	PublicKey string `json:"public_key"`
	// JWTBytes is the size of the user JWT; over SafeJWTBytes, servers
	// with the default max_control_line refuse the connection.
	JWTBytes int `json:"jwt_bytes"`
}

// AccountFile is one account IssueRoleCreds signed.
type AccountFile struct {
	// Name is the account's name (RoleConfig.AccountName).
	Name string `json:"name"`
	// Roles are the roles whose users it holds.
	Roles []Role `json:"roles"`
	// PublicKey is the account's public key ("A…").
	PublicKey string `json:"public_key"`
	// SeedFile is <dir>/<name>.account.nk; SeedCreated is set when
	// IssueRoleCreds created it.
	SeedFile    string `json:"seed_file"`
	SeedCreated bool   `json:"seed_created"`
	// JWTFile is <dir>/<name>.account.jwt.
	JWTFile string `json:"jwt_file"`
	// JWT is the account JWT.
	JWT string `json:"-"`
	// JWTBytes is its size.
	JWTBytes int `json:"jwt_bytes"`
}

// RoleCreds is what IssueRoleCreds wrote.
type RoleCreds struct {
	// Operator is the public key that signed the account JWTs ("O…").
	Operator string `json:"operator"`
	// Accounts are the accounts, the trusted one first.
	Accounts []AccountFile `json:"accounts"`
	// Users are the user creds files, in the order of the roles asked for.
	Users []CredsFile `json:"users"`
	// PreloadFile is <dir>/resolver-preload.conf.
	PreloadFile string `json:"resolver_preload_file"`
}

// IssueRoleCreds sets up the roles for servers in operator mode (JWT
// accounts) and writes what they need into d:
//
//   - one account per RoleConfig.Accounts, its key created once in
//     <dir>/<ACCOUNT>.account.nk and kept: the trusted account (JINGWEI),
//     with JetStream (cfg.JetStream) and its services exported to the
//     accounts that import them (private exports: each import carries an
//     activation token signed by the trusted account); and one account per
//     untrusted role (JINGWEI_AGENT, JINGWEI_REVIEWER, JINGWEI_HOST),
//     without JetStream, with its imports. Each account JWT is signed by
//     cfg.Operator and written to <dir>/<ACCOUNT>.account.jwt, and all of
//     them as entries of a resolver_preload block to
//     <dir>/resolver-preload.conf, for a server with `resolver: MEMORY`
//     (`resolver_preload { <system account>: <its JWT>, include
//     "resolver-preload.conf" }`; a full resolver takes the same JWTs
//     with `nsc push` or a $SYS.REQ.CLAIMS.UPDATE request);
//   - <dir>/<role>.creds for each role in cfg.Roles: a user JWT for the
//     role's own nkey (its seed in <dir>/<role>.nk, created by Init)
//     carrying the role's permissions inside its account
//     (RoleConfig.JWTPermissions) and the tag jingwei-role:<role>, signed
//     by the role's account, formatted with the seed by
//     jwt.FormatUserConfig;
//   - with tenants (cfg.Subjects.Tenants): an account per tenant
//     (<dir>/<Account>_TENANT_<tenant>.account.nk and .jwt) importing
//     only jw.api.call and jw.api.status for its sessions, and
//     <dir>/tenants/<tenant>/<agent>.creds for every agent key of such a
//     tenant in <dir>/tenants (AddTenantAgent), signed by the tenant's
//     account with TenantJWTPermissions. Agents added later need only
//     their creds signed by the tenant's account key: the server's
//     account JWTs do not change.
//
// Files are written 0600 (seeds, creds) or 0644 (JWTs) and replace earlier
// ones atomically (credentials are issued again when the permissions
// change; the account keys stay, so creds issued earlier stay valid).
func (d KeyDir) IssueRoleCreds(cfg CredsConfig) (*RoleCreds, error) {
	if cfg.Operator == nil {
		return nil, fmt.Errorf("%w: IssueRoleCreds: no operator key", ErrBadKey)
	}
	opub, err := cfg.Operator.PublicKey()
	if err != nil || !nkeys.IsValidPublicOperatorKey(opub) {
		return nil, fmt.Errorf("%w: the signing key is not an operator key (want a seed starting SO…)", ErrBadKey)
	}
	if err := cfg.Subjects.Validate(); err != nil {
		return nil, err
	}
	rc := cfg.Subjects.WithDefaults()
	roles := cfg.Roles
	if len(roles) == 0 {
		roles = Roles
	}
	for _, r := range roles {
		if !r.Valid() {
			return nil, fmt.Errorf("stream: IssueRoleCreds: %w: %q", ErrUnknownRole, r)
		}
	}
	if err := checkDir(string(d)); err != nil {
		return nil, err
	}
	out := &RoleCreds{Operator: opub, PreloadFile: d.ResolverPreloadFile()}
	specs := rc.Accounts()
	keys, err := d.accountKeys(specs, out)
	if err != nil {
		return nil, err
	}
	for i, a := range specs {
		if err := signAccount(cfg, a, &out.Accounts[i], out.Accounts[0], keys); err != nil {
			return nil, err
		}
	}
	for _, a := range out.Accounts {
		if err := replaceFileMode(a.JWTFile, []byte(a.JWT+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	if err := replaceFileMode(out.PreloadFile, []byte(preloadBlock(out)), 0o644); err != nil {
		return nil, err
	}
	for _, r := range roles {
		f, err := d.roleCreds(cfg, rc, r, keys)
		if err != nil {
			return out, err
		}
		out.Users = append(out.Users, f)
	}
	return out, d.tenantAgentCreds(cfg, rc, keys, out)
}

// accountKeys makes sure of each account's key and lists the accounts in
// out, the trusted account first.
func (d KeyDir) accountKeys(specs []AccountSpec, out *RoleCreds) (map[string]nkeys.KeyPair, error) {
	keys := map[string]nkeys.KeyPair{}
	for _, a := range specs {
		kf, err := ensureKey(d.AccountSeedFile(a.Name), nkeys.PrefixByteAccount)
		if err != nil {
			return nil, err
		}
		if keys[a.Name], err = readSeedOf(kf.Path, nkeys.PrefixByteAccount); err != nil {
			return nil, err
		}
		out.Accounts = append(out.Accounts, AccountFile{Name: a.Name, Roles: a.Roles, PublicKey: kf.PublicKey, SeedFile: kf.Path, SeedCreated: kf.Created, JWTFile: d.AccountJWTFile(a.Name)})
	}
	return keys, nil
}

// signAccount signs account a's JWT with the operator key into f: its
// JetStream limits, its exports, and its imports from the trusted
// account, each with an activation token the trusted account signs.
func signAccount(cfg CredsConfig, a AccountSpec, f *AccountFile, trusted AccountFile, keys map[string]nkeys.KeyPair) error {
	ac := jwt.NewAccountClaims(f.PublicKey)
	ac.Name = a.Name
	ac.Tags.Add("jingwei-account")
	if a.JetStream {
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		if cfg.JetStream != nil {
			ac.Limits.JetStreamLimits = *cfg.JetStream
		}
	}
	for _, e := range a.Exports {
		x := &jwt.Export{Name: e.Subject, Subject: jwt.Subject(e.Subject), Type: jwt.Service, TokenReq: true,
			ResponseType: jwt.ResponseTypeSingleton, ResponseThreshold: e.Threshold, Info: jwt.Info{Description: e.Why}}
		if e.Response == ResponseStream {
			x.ResponseType = jwt.ResponseTypeStream
		}
		ac.Exports.Add(x)
	}
	for _, im := range a.Imports {
		act := jwt.NewActivationClaims(f.PublicKey)
		act.Name = im.Subject
		act.ImportSubject = jwt.Subject(im.Subject)
		act.ImportType = jwt.Service
		token, err := act.Encode(keys[trusted.Name])
		if err != nil {
			return fmt.Errorf("stream: activation of %s for %s: %w", im.Subject, a.Name, err)
		}
		imp := &jwt.Import{Name: im.Subject, Subject: jwt.Subject(im.Subject), Account: trusted.PublicKey, Token: token, Type: jwt.Service}
		if im.To != "" {
			// The importer publishes on To; the server carries it
			// into the trusted account as Subject.
			imp.Subject, imp.LocalSubject = jwt.Subject(im.Subject), jwt.RenamingSubject(im.To)
		}
		ac.Imports.Add(imp)
	}
	vr := jwt.CreateValidationResults()
	ac.Validate(vr)
	if vr.IsBlocking(true) {
		return fmt.Errorf("stream: account JWT for %s: %v", a.Name, vr.Errors())
	}
	token, err := ac.Encode(cfg.Operator)
	if err != nil {
		return fmt.Errorf("stream: sign account JWT for %s: %w", a.Name, err)
	}
	f.JWT, f.JWTBytes = token, len(token)
	return nil
}

// roleCreds writes role r's creds file: its user JWT, signed by its
// account, with the role's permissions.
func (d KeyDir) roleCreds(cfg CredsConfig, rc RoleConfig, r Role, keys map[string]nkeys.KeyPair) (CredsFile, error) {
	kp, err := d.KeyPair(r)
	if err != nil {
		return CredsFile{}, err
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	account := rc.AccountName(r)
	uc := jwt.NewUserClaims(pub)
	uc.Name = "jingwei " + string(r)
	uc.Tags.Add("jingwei-role:" + string(r))
	uc.Permissions = rc.JWTPermissions(r)
	if cfg.Expires > 0 {
		uc.Expires = time.Now().Add(cfg.Expires).Unix()
	}
	vr := jwt.CreateValidationResults()
	uc.Validate(vr)
	if vr.IsBlocking(true) {
		return CredsFile{}, fmt.Errorf("stream: user JWT for %s: %v", r, vr.Errors())
	}
	token, err := uc.Encode(keys[account])
	if err != nil {
		return CredsFile{}, fmt.Errorf("stream: sign user JWT for %s: %w", r, err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return CredsFile{}, fmt.Errorf("stream: creds for %s: %w", r, err)
	}
	path := d.CredsFile(r)
	if err := replaceFile(path, creds); err != nil {
		return CredsFile{}, err
	}
	return CredsFile{Role: r, Account: account, Path: path, PublicKey: pub, JWTBytes: len(token)}, nil
}

// tenantAgentCreds writes the creds of the tenants' agents: every agent
// key in <dir>/tenants of a tenant in Subjects.Tenants, signed by its
// tenant's account, and lists them in out.
func (d KeyDir) tenantAgentCreds(cfg CredsConfig, rc RoleConfig, keys map[string]nkeys.KeyPair, out *RoleCreds) error {
	agents, err := d.TenantAgents()
	if err != nil {
		return err
	}
	for _, a := range agents {
		if _, ok := rc.tenant(a.Tenant); !ok {
			continue
		}
		account := rc.TenantAccountName(a.Tenant)
		uc := jwt.NewUserClaims(a.PublicKey)
		uc.Name = "jingwei agent " + a.Agent + " of tenant " + a.Tenant
		uc.Tags.Add("jingwei-role:" + string(RoleAgent))
		uc.Tags.Add("jingwei-tenant:" + a.Tenant)
		uc.Permissions = rc.TenantJWTPermissions()
		if cfg.Expires > 0 {
			uc.Expires = time.Now().Add(cfg.Expires).Unix()
		}
		token, err := uc.Encode(keys[account])
		if err != nil {
			return fmt.Errorf("stream: sign user JWT for agent %s of tenant %s: %w", a.Agent, a.Tenant, err)
		}
		kp, err := readUserSeed(a.Path)
		if err != nil {
			return err
		}
		seed, _ := kp.Seed()
		creds, err := jwt.FormatUserConfig(token, seed)
		if err != nil {
			return fmt.Errorf("stream: creds for agent %s of tenant %s: %w", a.Agent, a.Tenant, err)
		}
		path := d.TenantAgentCredsFile(a.Tenant, a.Agent)
		if err := replaceFile(path, creds); err != nil {
			return err
		}
		out.Users = append(out.Users, CredsFile{Role: RoleAgent, Tenant: a.Tenant, Account: account, Path: path, PublicKey: a.PublicKey, JWTBytes: len(token)})
	}
	return nil
}

// preloadBlock renders the account JWTs as entries of a resolver_preload
// block.
func preloadBlock(rc *RoleCreds) string {
	var b strings.Builder
	b.WriteString("# jingwei accounts, written by `jingwei auth creds`, signed by operator " + rc.Operator + ".\n")
	b.WriteString("# Entries of a resolver_preload block, for a server in operator mode with a memory resolver:\n")
	b.WriteString("#   operator: <the operator's JWT or its file>\n#   system_account: <the system account's public key>\n#   resolver: MEMORY\n")
	b.WriteString("#   resolver_preload {\n#     <the system account's public key>: <its JWT>\n#     include \"resolver-preload.conf\"\n#   }\n")
	for _, a := range rc.Accounts {
		roles := make([]string, len(a.Roles))
		for i, r := range a.Roles {
			roles[i] = string(r)
		}
		fmt.Fprintf(&b, "# %s: %s\n%s: %s\n", a.Name, strings.Join(roles, ", "), a.PublicKey, strconv.Quote(a.JWT))
	}
	return b.String()
}

// replaceFile writes b to a 0600 temporary file next to path, fsyncs it
// and renames it over path.
func replaceFile(path string, b []byte) error { return replaceFileMode(path, b, 0o600) }

// replaceFileMode is replaceFile with the file's mode.
func replaceFileMode(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("stream: write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("stream: write %s: %w", path, err)
	}
	return nil
}
