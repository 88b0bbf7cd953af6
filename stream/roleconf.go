package stream

import (
	"fmt"
	"strconv"
	"strings"
)

// AuthorizationBlock renders the nats-server configuration for an external
// server that enforces the roles: an `authorization { users = [...] }`
// block of static nkey users, one per role in users (public keys, as
// KeyDir.PublicKeys returns them), each with its role's permissions and a
// comment on every group of subjects saying why it is there. Paste it into
// the server's configuration file (or `include` it) next to the jetstream
// block. Roles missing from users get no user. It fails for an unknown role,
// a key that is not an nkey user public key, or one key for two roles.
func (c RoleConfig) AuthorizationBlock(users map[Role]string) (string, error) {
	if len(users) == 0 {
		return "", fmt.Errorf("stream: AuthorizationBlock: no users")
	}
	if err := validateUsers(users, c); err != nil {
		return "", err
	}
	c = c.WithDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "# jingwei roles: subject prefix %q, example tools prefix %q.\n", c.Prefix, c.ToolsPrefix)
	b.WriteString("# Written by `jingwei auth config`; every client connects with one role's seed (--nkey <dir>/<role>.nk).\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, r := range Roles {
		pub, ok := users[r]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "    # role %s\n    {\n      nkey: %s\n      permissions: {\n", r, strconv.Quote(pub))
		grants := c.Grants(r)
		for _, op := range []Op{OpPublish, OpSubscribe} {
			fmt.Fprintf(&b, "        %s: {\n", op)
			for _, deny := range []bool{false, true} {
				var lines []string
				for _, g := range grants {
					if g.Op != op || g.Deny != deny {
						continue
					}
					lines = append(lines, "            # "+oneLine(g.Why))
					for _, s := range g.Subjects {
						lines = append(lines, "            "+strconv.Quote(s))
					}
				}
				if len(lines) == 0 {
					continue
				}
				key := "allow"
				if deny {
					key = "deny"
				}
				fmt.Fprintf(&b, "          %s: [\n%s\n          ]\n", key, strings.Join(lines, "\n"))
			}
			b.WriteString("        }\n")
		}
		if p := c.Subjects(r); p.Responses {
			fmt.Fprintf(&b, "        # answer the requests it receives: one message to each reply subject, within %s\n", p.ResponseExpiry)
			fmt.Fprintf(&b, "        allow_responses: { max: 1, expires: %q }\n", p.ResponseExpiry.String())
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }
