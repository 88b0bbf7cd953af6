package access

import (
	"fmt"
	"strconv"
	"strings"
)

// AccountsBlock renders the nats-server configuration that enforces the
// roles on an external server: an `accounts { … }` block with
//
//   - the trusted account (RoleConfig.Account, "JINGWEI"): `jetstream:
//     enabled`, the worker, recoverer, prober and admin users, and the services it
//     exports, each to the accounts that import it;
//   - one account per untrusted role (JINGWEI_AGENT, JINGWEI_REVIEWER,
//     JINGWEI_HOST): its user and the services it imports from the trusted
//     account (Imports), without JetStream of its own.
//
// Users are static nkey users, one per role in users (public keys, as
// KeyDir.PublicKeys returns them), each with its role's permissions inside
// its account (Grants); every group of subjects carries a comment saying
// why it is there. Put the block into the server's configuration file (or
// `include` it) next to a `jetstream { … }` block; the file must define no
// other `authorization` users. Roles missing from users get no user (their
// accounts are still defined, so the exports stay valid). It fails for an
// unknown role, a key that is not an nkey user public key, or one key for
// two roles. EmbeddedConfig.Users runs the embedded server with this very
// block.
func (c RoleConfig) AccountsBlock(users map[Role]string) (string, error) {
	if len(users) == 0 {
		return "", fmt.Errorf("stream: AccountsBlock: no users")
	}
	if err := validateUsers(users, c); err != nil {
		return "", err
	}
	for _, t := range c.Tenants {
		for _, k := range t.Agents {
			for r, pub := range users {
				if pub == k {
					return "", fmt.Errorf("stream: AccountsBlock: role %s and an agent of tenant %s share one key", r, t.Name)
				}
			}
		}
	}
	c = c.WithDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "# jingwei roles: subject prefix %q, example tools prefix %q.\n", c.Prefix, c.ToolsPrefix)
	b.WriteString("# Written by `jingwei auth config`; every client connects with one role's seed (--nkey <dir>/<role>.nk).\n")
	fmt.Fprintf(&b, "# The trusted roles (worker, recoverer, prober, admin) share account %s, which holds JetStream; each\n", c.Account)
	b.WriteString("# other role has an account of its own that imports only the services it uses, so replies\n")
	b.WriteString("# and inboxes never cross from one account into another.\n")
	b.WriteString("accounts {\n")
	for _, a := range c.Accounts() {
		fmt.Fprintf(&b, "  %s {\n", strconv.Quote(a.Name))
		if a.JetStream {
			b.WriteString("    jetstream: enabled\n")
		}
		var us []string
		for _, r := range a.Roles {
			if pub, ok := users[r]; ok {
				us = append(us, userEntry(c, "role "+string(r), c.Grants(r), c.Subjects(r), pub))
			}
		}
		if t, ok := c.tenant(a.Tenant); ok {
			for _, pub := range t.Agents {
				us = append(us, userEntry(c, "agent of tenant "+t.Name, c.TenantGrants(), c.TenantSubjects(), pub))
			}
		}
		if len(us) > 0 {
			fmt.Fprintf(&b, "    users = [\n%s    ]\n", strings.Join(us, ""))
		}
		writeEntries(&b, "exports", len(a.Exports), func(i int) string { return a.Exports[i].Why }, func(i int) string {
			e := a.Exports[i]
			accs := make([]string, len(e.Accounts))
			for i, n := range e.Accounts {
				accs[i] = strconv.Quote(n)
			}
			line := fmt.Sprintf("{ service: %s, response_type: %s", strconv.Quote(e.Subject), e.Response)
			if e.Threshold > 0 {
				line += fmt.Sprintf(", response_threshold: %q", e.Threshold.String())
			}
			return line + fmt.Sprintf(", accounts: [%s] }", strings.Join(accs, ", "))
		})
		writeEntries(&b, "imports", len(a.Imports), func(i int) string { return a.Imports[i].Why }, func(i int) string {
			im := a.Imports[i]
			line := fmt.Sprintf("{ service: { account: %s, subject: %s }", strconv.Quote(c.Account), strconv.Quote(im.Subject))
			if im.To != "" {
				line += fmt.Sprintf(", to: %s", strconv.Quote(im.To))
			}
			return line + " }"
		})
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// userEntry renders one nkey user with its permissions: grants, and the
// response permission of p.
func userEntry(c RoleConfig, who string, grants []Grant, p RolePermissions, pub string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "      # %s\n      {\n        nkey: %s\n        permissions: {\n", who, strconv.Quote(pub))
	for _, op := range []Op{OpPublish, OpSubscribe} {
		fmt.Fprintf(&b, "          %s: {\n", op)
		for _, deny := range []bool{false, true} {
			var lines []string
			for _, g := range grants {
				if g.Op != op || g.Deny != deny {
					continue
				}
				lines = append(lines, "              # "+oneLine(g.Why))
				for _, s := range g.Subjects {
					lines = append(lines, "              "+strconv.Quote(s))
				}
			}
			if len(lines) == 0 {
				continue
			}
			key := "allow"
			if deny {
				key = "deny"
			}
			fmt.Fprintf(&b, "            %s: [\n%s\n            ]\n", key, strings.Join(lines, "\n"))
		}
		b.WriteString("          }\n")
	}
	if p.Responses {
		fmt.Fprintf(&b, "          # answer the requests it receives: one message to each reply subject, within %s\n", p.ResponseExpiry)
		fmt.Fprintf(&b, "          allow_responses: { max: 1, expires: %q }\n", p.ResponseExpiry.String())
	}
	b.WriteString("        }\n      }\n")
	return b.String()
}

func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

// writeEntries writes a list of an account block (exports, imports): n
// entries, line(i) each, preceded by a "# why" comment whenever why(i)
// changes. Nothing is written for an empty list.
func writeEntries(b *strings.Builder, name string, n int, why, line func(i int) string) {
	if n == 0 {
		return
	}
	b.WriteString("    " + name + " = [\n")
	last := ""
	for i := range n {
		if w := why(i); w != last {
			fmt.Fprintf(b, "      # %s\n", oneLine(w))
			last = w
		}
		b.WriteString("      " + line(i) + "\n")
	}
	b.WriteString("    ]\n")
}
