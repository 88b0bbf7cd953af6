package access_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/stream/access"
)

var updateRolesDoc = flag.Bool("update-roles-doc", false, "rewrite docs/roles.md from access.RoleConfig")

// rolesDocFile is the generated permission reference of the protocol
// document.
var rolesDocFile = filepath.Join("..", "..", "docs", "roles.md")

// TestRolesDoc keeps docs/roles.md, the protocol document's complete list of
// every role's permissions and every account's imports, equal to what the
// code enforces (access.RoleConfig with the default prefixes). After a
// change to the roles run:
//
//	go test ./stream/access -run TestRolesDoc -update-roles-doc
func TestRolesDoc(t *testing.T) {
	got := rolesDoc(access.RoleConfig{})
	if *updateRolesDoc {
		if err := os.WriteFile(rolesDocFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(rolesDocFile)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./stream/access -run TestRolesDoc -update-roles-doc)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the code enforces; regenerate it: go test ./stream/access -run TestRolesDoc -update-roles-doc", rolesDocFile)
	}
}

func rolesDoc(c access.RoleConfig) []byte {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Roles: the complete permission lists\n\n")
	p("Generated from `access.RoleConfig` (prefix `jw`, example tools prefix\n")
	p("`tools`, trusted account `JINGWEI`) by `go test ./stream/access -run TestRolesDoc\n")
	p("-update-roles-doc`; the test fails when this file and the code disagree.\n")
	p("See [protocol.md §4](protocol.md#4-roles-and-accounts) for what the roles\n")
	p("are and why the untrusted ones have accounts of their own.\n\n")
	p("Wildcards: `*` matches one subject token, `>` the rest. Deny wins over\n")
	p("allow.\n\n")
	p("A role's credential lets a process reach subjects; it never makes a\n")
	p("verdict count. Reviews and approvals count only when signed by a\n")
	p("person's own key named in the recovery worker's trusted reviewers file\n")
	p("or the tool workers' trusted approvers file (`<public key> <name>` a\n")
	p("line; `jingwei keys new --name`): the reviewer credential publishes\n")
	p("them, and `jingwei console` relays what people sign in their browsers\n")
	p("with the reviewer credential and no key of its own\n")
	p("([protocol.md §6](protocol.md#6-canonical-json-digests-and-signatures)).\n")
	p("Agents of a fleet get the credential of their tenant (below), which\n")
	p("reaches only the tenant's own sessions; the fleet-wide `agent` role is\n")
	p("an operator's.\n")
	for _, r := range access.Roles {
		p("\n## %s (account `%s`)\n\n", r, c.AccountName(r))
		p("| list | subjects | why |\n|---|---|---|\n")
		for _, g := range c.Grants(r) {
			kind := string(g.Op)
			if g.Deny {
				kind += " deny"
			} else {
				kind += " allow"
			}
			subs := make([]string, len(g.Subjects))
			for i, s := range g.Subjects {
				subs[i] = "`" + s + "`"
			}
			p("| %s | %s | %s |\n", kind, strings.Join(subs, "<br>"), strings.ReplaceAll(g.Why, "|", "\\|"))
		}
		if perm := c.Subjects(r); perm.Responses {
			p("| responses | one answer per request received, within %s | the service answers through it |\n", perm.ResponseExpiry)
		}
		if imps := c.Imports(r); len(imps) > 0 {
			p("\nImports from `%s`:\n\n| subject | response | why |\n|---|---|---|\n", c.AccountName(access.RoleAdmin))
			for _, imp := range imps {
				p("| `%s` | %s | %s |\n", imp.Subject, imp.Response, strings.ReplaceAll(imp.Why, "|", "\\|"))
			}
		}
	}
	// A tenant's agents, shown for a tenant named "<tenant>".
	tc := c
	tc.Tenants = []access.Tenant{{Name: "tenantname"}}
	name := func(s string) string { return strings.ReplaceAll(s, "tenantname", "<tenant>") }
	p("\n## agent of a tenant (account `%s`)\n\n", name(tc.TenantAccountName("tenantname")))
	p("A tenant owns the sessions whose id begins with `<tenant>-`; its agents\n")
	p("(`jingwei auth tenant`) ask the services below about those sessions\n")
	p("only, and reach nothing else (no JetStream: see protocol.md §4).\n\n")
	p("| list | subjects | why |\n|---|---|---|\n")
	for _, g := range tc.TenantGrants() {
		subs := make([]string, len(g.Subjects))
		for i, s := range g.Subjects {
			subs[i] = "`" + s + "`"
		}
		p("| %s allow | %s | %s |\n", g.Op, strings.Join(subs, "<br>"), strings.ReplaceAll(g.Why, "|", "\\|"))
	}
	p("\nImports from `%s` (the agent publishes on the local subject; the service receives the tenant's):\n\n| subject | local subject | response | why |\n|---|---|---|---|\n", c.AccountName(access.RoleAdmin))
	for _, imp := range tc.TenantImports("tenantname") {
		p("| `%s` | `%s` | %s | %s |\n", name(imp.Subject), imp.To, imp.Response, strings.ReplaceAll(imp.Why, "|", "\\|"))
	}
	p("\nExported by `%s` to every tenant's account:\n\n| subject | response | why |\n|---|---|---|\n", c.AccountName(access.RoleAdmin))
	for _, e := range tc.Exports() {
		if len(e.Accounts) == 1 && e.Accounts[0] == tc.TenantAccountName("tenantname") {
			p("| `%s` | %s | %s |\n", e.Subject, e.Response, strings.ReplaceAll(e.Why, "|", "\\|"))
		}
	}
	return b.Bytes()
}
