package access

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/stream"
)

// Tenant-scoped agents.
//
// The agent role sees every session: it publishes on jw.requests.*, reads
// JW_EVENTS and JW_ANSWERS, and asks jw.api.call and jw.api.status about
// any session. That suits one agent, or a fleet that trusts itself. A
// fleet of agents that must not see each other's sessions is split into
// tenants: a tenant owns the sessions whose id begins with "<tenant>-",
// and its agents connect as users of an account of its own
// (RoleConfig.TenantAccountName, JINGWEI_TENANT_<tenant>), which imports
// nothing but three services of the trusted account:
//
//	jw.api.call.<tenant>    imported as jw.api.call
//	jw.api.status.<tenant>  imported as jw.api.status
//	jw.api.history.<tenant> imported as jw.api.history
//
// The agent publishes on jw.api.call as any agent does; the server
// carries the request into the trusted account under the subject of its
// import, so the service learns the tenant from the subject
// (service.Caller), and no client can choose it: the import is written in
// the server's configuration or the operator-signed account JWT, and the
// tenant's own permissions name only the two local subjects. The
// services answer a tenant only about its own sessions (forbidden
// otherwise). Session subjects stay one token each (jw.events.<session>),
// and NATS wildcards match whole tokens only, so a tenant gets no direct
// JetStream access at all: no stream info (its subjects filter would list
// every session), no direct gets, no request publishes. It reads its
// sessions' logs through jw.api.history, which the recovery worker
// answers from the stream leader, one page at a time.

// MaxTenantBytes bounds a tenant name.
const MaxTenantBytes = 32

// TenantSeparator ends a tenant's name at the start of each of its session
// ids: tenant "acme" owns "acme-1" and "acme-orders-7", never "acme_x-1".
const TenantSeparator = "-"

// ValidTenant reports whether name is a tenant name: 1 to MaxTenantBytes
// of [A-Za-z0-9_]. A tenant name holds no "-" (TenantSeparator), so the
// tenant of a session is unambiguous.
func ValidTenant(name string) bool {
	if len(name) == 0 || len(name) > MaxTenantBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// SessionTenant returns the tenant that owns session: the part of its id
// before the first "-", or "" when it has none or that part is no tenant
// name (such a session belongs to no tenant).
func SessionTenant(session string) string {
	t, _, ok := strings.Cut(session, TenantSeparator)
	if !ok || !ValidTenant(t) {
		return ""
	}
	return t
}

// TenantOwns reports whether tenant owns session (SessionTenant(session)
// is tenant). An empty tenant owns nothing.
func TenantOwns(tenant, session string) bool {
	return tenant != "" && SessionTenant(session) == tenant
}

// Tenant is one tenant of agents (RoleConfig.Tenants).
type Tenant struct {
	// Name is the tenant's name (ValidTenant); it owns the sessions whose
	// id begins with Name + "-".
	Name string `json:"name"`
	// Agents are the nkey user public keys ("U…") of its agents, for a
	// server configured with AccountsBlock (static users); each becomes a
	// user of the tenant's account with TenantPermissions. In operator
	// mode the agents' user JWTs are signed by the tenant's account key
	// instead (IssueRoleCreds) and Agents may be empty.
	Agents []string `json:"agents,omitempty"`
}

// TenantEndpoints are the services a tenant's agents may ask, in the
// order the imports list them: run a call, ask for status, read a
// session's log.
var TenantEndpoints = []string{"call", "status", "history"}

// TenantAPISubject returns the subject under which the trusted account
// receives a tenant's requests to endpoint: <prefix>.api.<endpoint>.<tenant>.
func TenantAPISubject(prefix, endpoint, tenant string) string {
	return stream.APISubject(prefix, endpoint) + "." + tenant
}

// TenantAccountName returns the name of tenant's account:
// <Account>_TENANT_<tenant> ("JINGWEI_TENANT_acme" with the defaults).
func (c RoleConfig) TenantAccountName(tenant string) string {
	return c.WithDefaults().Account + "_TENANT_" + tenant
}

// validateTenants checks RoleConfig.Tenants: names, no tenant twice, nkey
// user public keys, no key for two agents.
func validateTenants(ts []Tenant) error {
	names := map[string]bool{}
	keys := map[string]string{}
	for _, t := range ts {
		if !ValidTenant(t.Name) {
			return fmt.Errorf("stream: RoleConfig.Tenants: tenant %q: want 1 to %d of [A-Za-z0-9_]", t.Name, MaxTenantBytes)
		}
		if names[t.Name] {
			return fmt.Errorf("stream: RoleConfig.Tenants: tenant %q twice", t.Name)
		}
		names[t.Name] = true
		for _, k := range t.Agents {
			if !nkeys.IsValidPublicUserKey(k) {
				return fmt.Errorf("stream: RoleConfig.Tenants[%s]: %q is not an nkey user public key", t.Name, k)
			}
			if other, ok := keys[k]; ok {
				return fmt.Errorf("stream: RoleConfig.Tenants: tenants %s and %s share the key %s", other, t.Name, k)
			}
			keys[k] = t.Name
		}
	}
	return nil
}

// tenantExports are the trusted account's exports for the tenants (none
// without tenants): each endpoint under <subject>.*, to every tenant's
// account. Each tenant imports only its own subject.
func (c RoleConfig) tenantExports() []ServiceExport {
	if len(c.Tenants) == 0 {
		return nil
	}
	c = c.WithDefaults()
	var accounts []string
	for _, t := range c.Tenants {
		accounts = append(accounts, c.TenantAccountName(t.Name))
	}
	var out []ServiceExport
	for _, e := range TenantEndpoints {
		out = append(out, ServiceExport{
			ServiceImport: ServiceImport{Subject: stream.APISubject(c.Prefix, e) + ".*", Response: ResponseSingleton, Threshold: c.ResponseExpiry,
				Why: "tenant-scoped agents: the tenant is the last token, set by each tenant account's import (never by the client)"},
			Accounts: accounts,
		})
	}
	return out
}

// TenantImports returns what tenant's account imports from the trusted
// account: jw.api.call.<tenant> as jw.api.call, jw.api.status.<tenant>
// as jw.api.status and jw.api.history.<tenant> as jw.api.history. Nil for
// a name that is not ValidTenant.
func (c RoleConfig) TenantImports(tenant string) []ServiceImport {
	if !ValidTenant(tenant) {
		return nil
	}
	c = c.WithDefaults()
	var out []ServiceImport
	for _, e := range TenantEndpoints {
		out = append(out, ServiceImport{
			Subject: TenantAPISubject(c.Prefix, e, tenant), To: stream.APISubject(c.Prefix, e),
			Response: ResponseSingleton, Threshold: c.ResponseExpiry,
			Why: "service: run a call, ask for status, read a session's log, about the tenant's own sessions only: the import carries the tenant in the subject the service receives",
		})
	}
	return out
}

// TenantGrants returns the permission table of a tenant's agents inside
// their tenant's account: publish the services' local subjects,
// receive replies. The same for every tenant.
func (c RoleConfig) TenantGrants() []Grant {
	c = c.WithDefaults()
	var subjects []string
	for _, e := range TenantEndpoints {
		subjects = append(subjects, stream.APISubject(c.Prefix, e))
	}
	return []Grant{
		pub("service: run a call, ask for status, read a session's log (the account's imports add the tenant; the services answer about its own sessions only)", subjects...),
		sub("replies: service answers (in the tenant's own account: no other tenant's replies reach it)", "_INBOX.>"),
	}
}

// TenantSubjects returns a tenant agent's permissions as sorted subject
// lists (Role is RoleAgent).
func (c RoleConfig) TenantSubjects() RolePermissions {
	return subjectsOf(RoleAgent, c.TenantGrants())
}

// TenantPermissions returns a tenant agent's permissions for a
// nats-server user (server.NkeyUser).
func (c RoleConfig) TenantPermissions() *server.Permissions {
	p := c.TenantSubjects()
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.PublishAllow},
		Subscribe: &server.SubjectPermission{Allow: p.SubscribeAllow},
	}
}

// TenantJWTPermissions returns a tenant agent's permissions for a user JWT
// in operator mode.
func (c RoleConfig) TenantJWTPermissions() jwt.Permissions {
	p := c.TenantSubjects()
	return jwt.Permissions{Pub: jwt.Permission{Allow: p.PublishAllow}, Sub: jwt.Permission{Allow: p.SubscribeAllow}}
}

// tenantAccounts are the tenants' accounts, in the order of Tenants.
func (c RoleConfig) tenantAccounts() []AccountSpec {
	var out []AccountSpec
	for _, t := range c.Tenants {
		out = append(out, AccountSpec{Name: c.TenantAccountName(t.Name), Tenant: t.Name, Imports: c.TenantImports(t.Name)})
	}
	return out
}

// tenant returns the tenant named name, if RoleConfig.Tenants has it.
func (c RoleConfig) tenant(name string) (Tenant, bool) {
	i := slices.IndexFunc(c.Tenants, func(t Tenant) bool { return t.Name == name })
	if i < 0 {
		return Tenant{}, false
	}
	return c.Tenants[i], true
}

// TenantsDir is the directory of a KeyDir that holds the tenants' agent
// keys: <dir>/tenants/<tenant>/<agent>.nk.
const TenantsDir = "tenants"

// ValidAgentName reports whether name may name an agent of a tenant (its
// key file): 1 to 64 of [A-Za-z0-9_-].
func ValidAgentName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// TenantAgentSeedFile returns <dir>/tenants/<tenant>/<agent>.nk.
func (d KeyDir) TenantAgentSeedFile(tenant, agent string) string {
	return filepath.Join(string(d), TenantsDir, tenant, agent+".nk")
}

// TenantAgentCredsFile returns <dir>/tenants/<tenant>/<agent>.creds, the
// agent's user JWT and seed in operator mode (IssueRoleCreds).
func (d KeyDir) TenantAgentCredsFile(tenant, agent string) string {
	return filepath.Join(string(d), TenantsDir, tenant, agent+".creds")
}

// TenantAgent is one agent key of a tenant in a KeyDir.
type TenantAgent struct {
	// Tenant and Agent name it.
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	KeyFile
}

// AddTenantAgent creates the agent's key (<dir>/tenants/<tenant>/<agent>.nk,
// 0600, its directories 0700) unless it exists, and returns it (Created
// set when it was written). The directory itself must exist (Init).
func (d KeyDir) AddTenantAgent(tenant, agent string) (TenantAgent, error) {
	if !ValidTenant(tenant) {
		return TenantAgent{}, fmt.Errorf("%w: tenant %q: want 1 to %d of [A-Za-z0-9_]", ErrBadKey, tenant, MaxTenantBytes)
	}
	if !ValidAgentName(agent) {
		return TenantAgent{}, fmt.Errorf("%w: agent %q: want 1 to 64 of [A-Za-z0-9_-]", ErrBadKey, agent)
	}
	if err := checkDir(string(d)); err != nil {
		return TenantAgent{}, err
	}
	for _, dir := range []string{filepath.Join(string(d), TenantsDir), filepath.Join(string(d), TenantsDir, tenant)} {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return TenantAgent{}, fmt.Errorf("stream: %w", err)
		}
		if err := checkDir(dir); err != nil {
			return TenantAgent{}, err
		}
	}
	kf, err := ensureSeed(d.TenantAgentSeedFile(tenant, agent))
	return TenantAgent{Tenant: tenant, Agent: agent, KeyFile: kf}, err
}

// TenantAgents returns every agent key under <dir>/tenants, by tenant and
// agent name. No tenants directory: none. A directory or file that is not
// a tenant or an agent key, or one others can read, is an error.
func (d KeyDir) TenantAgents() ([]TenantAgent, error) {
	root := filepath.Join(string(d), TenantsDir)
	tenants, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	if err := checkDir(root); err != nil {
		return nil, err
	}
	var out []TenantAgent
	for _, t := range tenants {
		if !t.IsDir() || !ValidTenant(t.Name()) {
			return nil, fmt.Errorf("%w: %s: not a tenant directory (want 1 to %d of [A-Za-z0-9_])", ErrBadKey, filepath.Join(root, t.Name()), MaxTenantBytes)
		}
		if err := checkDir(filepath.Join(root, t.Name())); err != nil {
			return nil, err
		}
		files, err := os.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			return nil, fmt.Errorf("stream: %w", err)
		}
		for _, f := range files {
			agent, ok := strings.CutSuffix(f.Name(), ".nk")
			if !ok || strings.HasPrefix(f.Name(), ".") {
				continue // creds files, temporary files
			}
			if !ValidAgentName(agent) {
				return nil, fmt.Errorf("%w: %s: not an agent key name", ErrBadKey, filepath.Join(root, t.Name(), f.Name()))
			}
			path := d.TenantAgentSeedFile(t.Name(), agent)
			kp, err := readUserSeed(path)
			if err != nil {
				return nil, err
			}
			pub, _ := kp.PublicKey()
			out = append(out, TenantAgent{Tenant: t.Name(), Agent: agent, KeyFile: KeyFile{Role: RoleAgent, Path: path, PublicKey: pub}})
		}
	}
	return out, nil
}

// Tenants returns the tenants of TenantAgents with their agents' public
// keys, for RoleConfig.Tenants.
func (d KeyDir) Tenants() ([]Tenant, error) {
	agents, err := d.TenantAgents()
	if err != nil {
		return nil, err
	}
	var out []Tenant
	for _, a := range agents {
		if len(out) == 0 || out[len(out)-1].Name != a.Tenant {
			out = append(out, Tenant{Name: a.Tenant})
		}
		out[len(out)-1].Agents = append(out[len(out)-1].Agents, a.PublicKey)
	}
	return out, nil
}
