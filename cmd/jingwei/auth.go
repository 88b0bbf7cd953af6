package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"time"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/authreport"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

func init() {
	register(command{name: "auth", summary: "role credentials and the server permissions that enforce them (auth init|config|check|creds)", run: runAuth})
}

const authHelp = `  jingwei auth init   --dir DIR [--prefix jw] [--tools-prefix tools] [--account JINGWEI] [--json]
  jingwei auth config --dir DIR [--prefix jw] [--tools-prefix tools] [--account JINGWEI]
  jingwei auth check  --dir DIR [--server URL] [--operator] [--tlsca FILE]
                      [--prefix jw] [--tools-prefix tools] [--account JINGWEI]
                      [--roles r1,r2] [--timeout 2s] [--json]
  jingwei auth creds  --dir DIR --operator-seed FILE [--roles r1,r2]
                      [--expires D] [--prefix jw] [--tools-prefix tools]
                      [--account JINGWEI] [--json]
  jingwei auth tenant --dir DIR --tenant NAME [--agent agent] [--json]

Every jingwei client connects as one role: agent, reviewer, host, worker,
recoverer, prober or admin (docs/protocol.md §4). The trusted roles (worker,
recoverer, prober, admin) share one NATS account, JINGWEI (--account), which holds JetStream
and the streams. Each other role has an account of its own (JINGWEI_AGENT,
JINGWEI_REVIEWER, JINGWEI_HOST) that imports from JINGWEI only the services
the role uses: replies and inboxes never cross from one account into
another, so no role can have the server answer onto a jingwei subject or
read another role's replies. Inside each account the user's permissions
keep the role to its subjects too.

auth init writes what is missing in DIR (created 0700): one nkey user seed
per role (DIR/<role>.nk, 0600), the plan-signing key (DIR/planner.nk, 0600)
and the plan signers tool workers trust (DIR/planners, one public key per
line, 0644). Existing keys are kept, never replaced. It prints which file
each kind of client uses and the nats-server accounts block for the role
keys.

auth config prints that accounts block for the keys in DIR: the accounts
with their exports and imports, and a static nkey user per role with its
permissions, to put into (or include from) the configuration of an
external nats-server that has a jetstream block and no other users.

auth check connects to the server as every role (DIR/<role>.nk, or with
--operator DIR/<role>.creds), and as the first agent of every tenant in
DIR/tenants, and checks that each action the role needs
works and each one it must not take is refused by the server, and how: a
permissions violation, not imported into the role's account (no
responders, and admin's connection in JINGWEI saw nothing), or account
isolation (an injected reply subject and another account's inboxes stay
out of reach). The probes change nothing, even where a permission is
wrongly granted. It prints one row per probe (--json: the whole report).

auth creds is for servers in operator mode (JWT accounts). With the
operator's seed in FILE (SO…: the operator key or one of its signing keys)
it signs the account JWTs: JINGWEI with JetStream and its exports, and one
account per untrusted role with its imports (account keys are created once
in DIR/<ACCOUNT>.account.nk and kept). It writes them to
DIR/<ACCOUNT>.account.jwt and, as entries of a resolver_preload block, to
DIR/resolver-preload.conf (resolver: MEMORY; a full resolver takes the
same JWTs with nsc push). Then it signs a user JWT per role (--roles: only
these) with the role's permissions for the role's key in DIR, by the
role's account, and writes DIR/<role>.creds (0600, replacing earlier
ones). Clients then connect with --creds DIR/<role>.creds.

auth tenant gives an agent a credential scoped to one tenant's sessions:
it creates the agent's key DIR/tenants/NAME/AGENT.nk (0600; kept if it
exists). Tenant NAME (1 to 32 of [A-Za-z0-9_], no "-") owns the sessions
whose id begins with NAME- (acme owns acme-1, acme-orders-7). Its agents
connect as users of an account of their own, JINGWEI_TENANT_NAME, which
imports only jw.api.call and jw.api.status, carried to the services as
jw.api.call.NAME and jw.api.status.NAME: the services answer them about
NAME's sessions only (forbidden otherwise), and they reach no stream, no
other session, no other tenant's replies. The fleet-wide agent role
(DIR/agent.nk) sees every session: keep it for operators. auth config,
auth creds, auth check and jingwei serve take every tenant in
DIR/tenants: restart serve (or reload the external server with the new
auth config) after adding a tenant or, with static keys, an agent; in
operator mode auth creds signs DIR/tenants/NAME/AGENT.creds with the
tenant's account key, and a new agent of an existing tenant needs no
change on the server.

A directory or key file that other users can read or write is refused;
the message says which chmod fixes it.

Exit status:
  0  success (check: every role can do what it must and nothing else)
  1  unexpected failure: a file cannot be written, or (check) no role can
     connect to the server
  2  usage: a bad flag, a missing or insecure key file or directory
  3  check: some role can do something it must not, or cannot do what it
     must (the rows marked FAIL)`

func runAuth(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, "Usage:\n%s\n", authHelp)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch args[0] {
	case "init":
		return runAuthInit(ctx, args[1:], stdout, stderr)
	case "config":
		return runAuthConfig(ctx, args[1:], stdout, stderr)
	case "check":
		return runAuthCheck(ctx, args[1:], stdout, stderr)
	case "creds":
		return runAuthCreds(ctx, args[1:], stdout, stderr)
	case "tenant":
		return runAuthTenant(ctx, args[1:], stdout, stderr)
	}
	return usageError(stderr, "auth", "unknown subcommand %q (want init, config, check, creds or tenant)", args[0])
}

// authFlags are the flags every auth subcommand takes.
type authFlags struct {
	dir, prefix, toolsPrefix, account string
}

func (a *authFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.dir, "dir", envOr("JINGWEI_AUTH_DIR", ""), "directory of the role credentials (env JINGWEI_AUTH_DIR; required)")
	fs.StringVar(&a.prefix, "prefix", envOr("JINGWEI_PREFIX", "jw"), "subject prefix of the jingwei topology (env JINGWEI_PREFIX)")
	fs.StringVar(&a.toolsPrefix, "tools-prefix", access.DefaultToolsPrefix, "prefix of the example tools' buckets and stream")
	fs.StringVar(&a.account, "account", access.DefaultAccount, "name of the trusted NATS account; the untrusted roles' accounts are <account>_AGENT, _REVIEWER, _HOST")
}

// check returns the role config, or a usage problem.
func (a *authFlags) check() (access.RoleConfig, string) {
	if a.dir == "" {
		return access.RoleConfig{}, "--dir is required"
	}
	rc := access.RoleConfig{Prefix: a.prefix, ToolsPrefix: a.toolsPrefix, Account: a.account}
	if err := rc.Validate(); err != nil {
		return rc, err.Error()
	}
	return rc, ""
}

// withTenants returns rc with the tenants whose agent keys are in the
// directory (DIR/tenants).
func (a *authFlags) withTenants(rc access.RoleConfig) (access.RoleConfig, error) {
	ts, err := access.KeyDir(a.dir).Tenants()
	if err != nil {
		return rc, err
	}
	rc.Tenants = ts
	return rc, rc.Validate()
}

// keyError is the exit status of a failure to read or write keys: a
// usage problem for what the operator must fix (missing, insecure, not a
// key), a failure otherwise.
func keyError(stderr io.Writer, name string, err error) int {
	if errors.Is(err, access.ErrInsecureFile) || errors.Is(err, access.ErrBadKey) || errors.Is(err, access.ErrUnknownRole) || errors.Is(err, iofs.ErrNotExist) {
		return usageError(stderr, name, "%v", err)
	}
	fmt.Fprintf(stderr, "jingwei %s: %v\n", name, err)
	return exitFailure
}

// roleUse says which client connects as a role, and how.
var roleUse = authreport.RoleUse

func runAuthInit(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("auth init", "Create the role keys, the plan-signing key and the planners file (what is missing).", authHelp, stderr)
	var af authFlags
	af.register(fs)
	asJSON := fs.Bool("json", false, "print the keys and the accounts block as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	rc, msg := af.check()
	if msg != "" {
		return usageError(stderr, "auth", "%s", msg)
	}
	res, err := access.KeyDir(af.dir).Init()
	if err != nil {
		return keyError(stderr, "auth init", err)
	}
	keys := map[access.Role]string{}
	for _, kf := range res.Roles {
		keys[kf.Role] = kf.PublicKey
	}
	block, err := rc.AccountsBlock(keys)
	if err != nil {
		return keyError(stderr, "auth init", err)
	}
	if !res.PlannerTrusted {
		fmt.Fprintf(stderr, "jingwei auth init: warning: %s does not list the planner key %s; tool workers will refuse plans signed with it (add the key or remove the file and run init again)\n", res.Planners, res.Planner.PublicKey)
	}
	out := authreport.Init{KeyDirInit: res, Accounts: block}
	if *asJSON {
		_ = writeJSON(stdout, out)
		return exitOK
	}
	authreport.WriteInit(stdout, rc, af.dir, out)
	return exitOK
}

func runAuthConfig(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("auth config", "Print the nats-server accounts block (accounts, imports, exports, role users) for the role keys in --dir.", authHelp, stderr)
	var af authFlags
	af.register(fs)
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	rc, msg := af.check()
	if msg != "" {
		return usageError(stderr, "auth", "%s", msg)
	}
	keys, err := access.KeyDir(af.dir).PublicKeys()
	if err != nil {
		return keyError(stderr, "auth config", fmt.Errorf("%w (create the keys with: jingwei auth init --dir %s)", err, af.dir))
	}
	if rc, err = af.withTenants(rc); err != nil {
		return keyError(stderr, "auth config", err)
	}
	block, err := rc.AccountsBlock(keys)
	if err != nil {
		return keyError(stderr, "auth config", err)
	}
	fmt.Fprint(stdout, block)
	return exitOK
}

func runAuthCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("auth check", "Check, as every role, that the server allows what the role needs and refuses the rest.", authHelp, stderr)
	var af authFlags
	af.register(fs)
	server := fs.String("server", envOr("NATS_URL", natsnode.DefaultURL), "NATS server URL(s), comma separated (env NATS_URL)")
	tlsca := fs.String("tlsca", envOr("NATS_CA", ""), "PEM file of CAs to verify the server's TLS certificate (env NATS_CA)")
	operator := fs.Bool("operator", false, "connect with DIR/<role>.creds (operator mode, see auth creds) instead of DIR/<role>.nk")
	roles := fs.String("roles", "", "only these roles, comma separated (default: all)")
	timeout := fs.Duration("timeout", 2*time.Second, "how long one probe waits for the server")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	rc, msg := af.check()
	if msg != "" {
		return usageError(stderr, "auth", "%s", msg)
	}
	if *timeout <= 0 {
		return usageError(stderr, "auth", "--timeout must be positive")
	}
	only, err := authreport.ParseRoles(*roles)
	if err != nil {
		return usageError(stderr, "auth", "%v", err)
	}
	if rc, err = af.withTenants(rc); err != nil {
		return keyError(stderr, "auth check", err)
	}
	rep, err := access.CheckRoles(ctx, access.CheckConfig{
		URL: *server, Dir: access.KeyDir(af.dir), Creds: *operator, TLSCA: *tlsca,
		Roles: only, Subjects: rc, Timeout: *timeout,
	})
	if err != nil {
		if errors.Is(err, access.ErrInsecureFile) || errors.Is(err, access.ErrBadKey) || errors.Is(err, iofs.ErrNotExist) {
			return usageError(stderr, "auth", "%v", err)
		}
		if isAuthError(err) {
			fmt.Fprintf(stderr, "jingwei auth check: %v\n", err)
		} else {
			fmt.Fprintf(stderr, "jingwei auth check: %v (is a server running at %s?)\n", err, *server)
		}
		return exitFailure
	}
	if *asJSON {
		_ = writeJSON(stdout, rep)
	} else {
		authreport.WriteCheck(stdout, rep)
	}
	if !rep.OK {
		return exitRefused
	}
	return exitOK
}

func runAuthCreds(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("auth creds", "Issue the account JWTs and DIR/<role>.creds (user JWTs with the role permissions) for operator mode.", authHelp, stderr)
	var af authFlags
	af.register(fs)
	seed := fs.String("operator-seed", "", "file with the operator's seed (SO…), or one of its signing keys' (required; must be 0600)")
	roles := fs.String("roles", "", "issue user creds for these roles only, comma separated (default: all); the account JWTs are always issued")
	expires := fs.Duration("expires", 0, "validity of the user credentials from now (default: they never expire)")
	asJSON := fs.Bool("json", false, "print the files written as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	rc, msg := af.check()
	if msg != "" {
		return usageError(stderr, "auth", "%s", msg)
	}
	if *seed == "" {
		return usageError(stderr, "auth", "--operator-seed is required")
	}
	if *expires < 0 {
		return usageError(stderr, "auth", "--expires must not be negative")
	}
	only, err := authreport.ParseRoles(*roles)
	if err != nil {
		return usageError(stderr, "auth", "%v", err)
	}
	okp, err := access.ReadSeedFile(*seed)
	if err != nil {
		return keyError(stderr, "auth creds", err)
	}
	if rc, err = af.withTenants(rc); err != nil {
		return keyError(stderr, "auth creds", err)
	}
	res, err := access.KeyDir(af.dir).IssueRoleCreds(access.CredsConfig{Operator: okp, Subjects: rc, Roles: only, Expires: *expires})
	if err != nil {
		return keyError(stderr, "auth creds", err)
	}
	for _, w := range authreport.OversizedJWTs(res) {
		fmt.Fprintf(stderr, "jingwei auth creds: %s\n", w)
	}
	if *asJSON {
		_ = writeJSON(stdout, authreport.Creds{RoleCreds: res})
		return exitOK
	}
	authreport.WriteCreds(stdout, af.dir, res)
	return exitOK
}

func runAuthTenant(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("auth tenant", "Create an agent key scoped to one tenant's sessions (DIR/tenants/NAME/AGENT.nk).", authHelp, stderr)
	var af authFlags
	af.register(fs)
	tenant := fs.String("tenant", "", "the tenant: 1 to 32 of [A-Za-z0-9_]; it owns the sessions NAME-… (required)")
	agent := fs.String("agent", "agent", "the agent's name in the tenant (its key file)")
	asJSON := fs.Bool("json", false, "print the key as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	rc, msg := af.check()
	if msg != "" {
		return usageError(stderr, "auth", "%s", msg)
	}
	if !access.ValidTenant(*tenant) {
		return usageError(stderr, "auth", "--tenant %q: want 1 to %d of [A-Za-z0-9_] (no \"-\": it ends the tenant in a session id)", *tenant, access.MaxTenantBytes)
	}
	if !access.ValidAgentName(*agent) {
		return usageError(stderr, "auth", "--agent %q: want 1 to 64 of [A-Za-z0-9_-]", *agent)
	}
	dir := access.KeyDir(af.dir)
	if _, err := dir.Init(); err != nil {
		return keyError(stderr, "auth tenant", err)
	}
	ta, err := dir.AddTenantAgent(*tenant, *agent)
	if err != nil {
		return keyError(stderr, "auth tenant", err)
	}
	out := authreport.NewTenant(rc, ta)
	if *asJSON {
		_ = writeJSON(stdout, out)
		return exitOK
	}
	authreport.WriteTenant(stdout, af.dir, out)
	return exitOK
}
