// Package authreport writes what the jingwei auth commands print: the role
// keys auth init made or kept, the probes of auth check, the credentials
// auth creds issued and the agent key auth tenant made, each as text for
// an operator and as the value the commands print with --json.
package authreport

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/jingwei/jingwei/stream/access"
)

// RoleUse says which client connects as a role, and how.
var RoleUse = map[access.Role]string{
	access.RoleAgent:     "fleet-wide agents (every session; tenants: jingwei auth tenant): tool requests, jw.api.call/status (jingwei call)",
	access.RoleReviewer:  "reviewers and approvers: jingwei review, approve (which sign with their own keys, e.g. DATA/review-signer.nk)",
	access.RoleHost:      "hosts and operators: prepare retries, status, inspect, export, nats micro",
	access.RoleWorker:    "tool workers: jingwei worker (answers jw.api.call)",
	access.RoleRecoverer: "the recovery worker: jingwei recover (answers jw.api.inspect, prepare, status, history)",
	access.RoleProber:    "the prober: jingwei serve's, recover --probe-key (reads what it probes, publishes signed automated reviews)",
	access.RoleAdmin:     "setup and administration only: creates the streams and buckets (jingwei serve, nats CLI)",
}

// ParseRoles parses a --roles list (comma separated); empty means every
// role (nil). An unknown role is an error that names it.
func ParseRoles(list string) ([]access.Role, error) {
	if list == "" {
		return nil, nil
	}
	var out []access.Role
	for _, r := range strings.Split(list, ",") {
		r := access.Role(strings.TrimSpace(r))
		if !r.Valid() {
			return nil, fmt.Errorf("--roles: unknown role %q", r)
		}
		out = append(out, r)
	}
	return out, nil
}

// Init is what auth init prints with --json: the keys and the accounts
// block.
type Init struct {
	access.KeyDirInit
	// Accounts is the nats-server accounts block (auth config).
	Accounts string `json:"accounts_block"`
}

// WriteInit writes the keys of res as a table, with the file each client
// connects with and the accounts block. rc names the accounts; dirArg is
// the directory as the operator gave it (--dir), for the commands it
// suggests.
func WriteInit(w io.Writer, rc access.RoleConfig, dirArg string, res Init) {
	created := func(b bool) string {
		if b {
			return "created"
		}
		return "kept"
	}
	fmt.Fprintf(w, "Role credentials in %s:\n\n", res.Dir)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tACCOUNT\tFILE\tPUBLIC KEY\tSTATUS\tUSED BY")
	for _, kf := range res.Roles {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", kf.Role, rc.AccountName(kf.Role), kf.Path, kf.PublicKey, created(kf.Created), RoleUse[kf.Role])
	}
	fmt.Fprintf(tw, "planner\t-\t%s\t%s\t%s\t%s\n", res.Planner.Path, res.Planner.PublicKey, created(res.Planner.Created), "the recovery worker signs retry plans with it")
	fmt.Fprintf(tw, "planners\t-\t%s\t-\t%s\t%s\n", res.Planners, created(res.PlannersCreated), "tool workers accept plans signed by the keys listed here")
	tw.Flush()
	dir := access.KeyDir(dirArg)
	fmt.Fprintf(w, "\nEvery client connects with its role's seed: --nkey %s (e.g. jingwei worker --nkey %s).\n", dir.SeedFile("<role>"), dir.SeedFile(access.RoleWorker))
	fmt.Fprintf(w, "For an external nats-server, add these accounts to its configuration, next to its jetstream block\n(jingwei auth config --dir %s prints them again), then run jingwei auth check --dir %s --server URL:\n\n%s", dirArg, dirArg, res.Accounts)
}

// WriteCheck writes one row per probe of rep and a summary.
func WriteCheck(w io.Writer, rep *access.CheckReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tACCOUNT\tACTION\tEXPECT\tGOT\tRESULT")
	for _, r := range rep.Results {
		res := "ok"
		if !r.OK {
			res = "FAIL: " + r.Detail
		} else if r.Got == access.Skipped {
			res = "skipped: " + r.Detail
		}
		got := string(r.Got)
		if r.RefusedBy != "" {
			got += " (" + string(r.RefusedBy) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", roleName(r.Role, r.Tenant), r.Account, r.Action, r.Expect, got, res)
	}
	tw.Flush()
	bad := len(rep.Failures())
	if bad == 0 {
		fmt.Fprintf(w, "\n%s: all %d probes as expected: every role can do what it must, and the server refuses the rest.\n", rep.URL, len(rep.Results))
		return
	}
	fmt.Fprintf(w, "\n%s: %d of %d probes NOT as expected (rows marked FAIL).\n", rep.URL, bad, len(rep.Results))
}

// roleName is a role as the tables name it, with its tenant if any.
func roleName(r access.Role, tenant string) string {
	if tenant != "" {
		return string(r) + " (tenant " + tenant + ")"
	}
	return string(r)
}

// Creds is what auth creds prints with --json: the files written.
type Creds struct {
	*access.RoleCreds
}

// OversizedJWTs returns a warning for every user JWT of res over
// access.SafeJWTBytes, which a server with the default max_control_line
// refuses.
func OversizedJWTs(res *access.RoleCreds) []string {
	var out []string
	for _, f := range res.Users {
		if f.JWTBytes > access.SafeJWTBytes {
			out = append(out, fmt.Sprintf("warning: the %s JWT is %d bytes; a server with the default max_control_line (4KB) refuses it: set max_control_line: 16KB in its configuration", f.Role, f.JWTBytes))
		}
	}
	return out
}

// WriteCreds writes the accounts and the user creds of res as two tables,
// and how to give them to the server. dirArg is the directory as the
// operator gave it (--dir).
func WriteCreds(w io.Writer, dirArg string, res *access.RoleCreds) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tROLES\tPUBLIC KEY\tJWT FILE\tJWT BYTES")
	for _, a := range res.Accounts {
		names := make([]string, len(a.Roles))
		for i, r := range a.Roles {
			names[i] = string(r)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", a.Name, strings.Join(names, ","), a.PublicKey, a.JWTFile, a.JWTBytes)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tACCOUNT\tCREDS FILE\tUSER\tJWT BYTES")
	for _, f := range res.Users {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", roleName(f.Role, f.Tenant), f.Account, f.Path, f.PublicKey, f.JWTBytes)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nThe account JWTs are signed by operator key %s. Give them to the server: with a memory resolver,\n"+
		"  resolver: MEMORY\n  resolver_preload {\n    <system account>: <its JWT>\n    include %q\n  }\n"+
		"(a full resolver takes the JWT files with nsc push). Clients connect with --creds %s;\ncheck with: jingwei auth check --dir %s --operator --server URL\n",
		res.Operator, res.PreloadFile, access.KeyDir(dirArg).CredsFile("<role>"), dirArg)
}

// Tenant is what auth tenant prints with --json: the agent's key, its
// account and the sessions it may use.
type Tenant struct {
	access.TenantAgent
	Account       string `json:"account"`
	SessionPrefix string `json:"session_prefix"`
}

// NewTenant describes the agent key ta in the accounts rc names.
func NewTenant(rc access.RoleConfig, ta access.TenantAgent) Tenant {
	return Tenant{TenantAgent: ta, Account: rc.TenantAccountName(ta.Tenant), SessionPrefix: ta.Tenant + access.TenantSeparator}
}

// WriteTenant writes the agent key of t, what it may do and what the
// server needs for it. dirArg is the directory as the operator gave it
// (--dir).
func WriteTenant(w io.Writer, dirArg string, t Tenant) {
	state := "kept"
	if t.Created {
		state = "created"
	}
	fmt.Fprintf(w, "Agent %s of tenant %s: key %s (%s), public key %s, account %s.\n", t.Agent, t.Tenant, t.Path, state, t.PublicKey, t.Account)
	fmt.Fprintf(w, "It may call jw.api.call and jw.api.status for sessions %s… only (e.g. jingwei call --nkey %s --session %s1 …).\n", t.SessionPrefix, t.Path, t.SessionPrefix)
	fmt.Fprintf(w, "Restart jingwei serve (it loads %s), or give an external server the new accounts: jingwei auth config --dir %s (operator mode: jingwei auth creds --dir %s --operator-seed FILE writes %s).\n",
		filepath.Join(dirArg, access.TenantsDir), dirArg, dirArg, access.KeyDir(dirArg).TenantAgentCredsFile(t.Tenant, t.Agent))
}
