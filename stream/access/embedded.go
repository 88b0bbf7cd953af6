package access

import (
	"fmt"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/stream/natsnode"
)

// Users runs an embedded server (stream.EmbeddedConfig.Auth) with the
// roles' accounts (RoleConfig.AccountsBlock, the same text an external
// server is given): the trusted account (worker, recoverer, prober, admin) with
// JetStream and its exports, and one account per untrusted role (agent,
// reviewer, host) importing what the role uses. Each role's nkey user
// public key ("U…", see KeyDir.PublicKeys) becomes a user of its role's
// account with the role's permissions (RoleConfig.Permissions); a role
// left out has no user. Empty Keys keeps the server open to every client
// with full access, in one account.
type Users struct {
	// Keys is each role's nkey user public key.
	Keys map[Role]string
	// Roles names the subjects of the users' permissions: the topology's
	// prefix and the example tools' prefix. The zero value is the
	// defaults ("jw", "tools").
	Roles RoleConfig
}

var _ natsnode.Authorization = Users{}

// Validate checks the keys: known roles, nkey user public keys, no key
// shared by two roles.
func (u Users) Validate() error { return validateUsers(u.Keys, u.Roles) }

// AccountsBlock returns the roles' accounts block, "" without keys.
func (u Users) AccountsBlock() (string, error) {
	if len(u.Keys) == 0 {
		return "", nil
	}
	return u.Roles.AccountsBlock(u.Keys)
}

// validateUsers checks EmbeddedConfig.Users: known roles, nkey user public
// keys, no key shared by two roles (the server would refuse it, and one
// key for two roles would give one of them the other's permissions).
func validateUsers(users map[Role]string, rc RoleConfig) error {
	if len(users) == 0 {
		return nil
	}
	if err := rc.Validate(); err != nil {
		return err
	}
	seen := make(map[string]Role, len(users))
	for r, pub := range users {
		if !r.Valid() {
			return fmt.Errorf("stream: EmbeddedConfig.Users: %w: %q", ErrUnknownRole, r)
		}
		if !nkeys.IsValidPublicUserKey(pub) {
			return fmt.Errorf("stream: EmbeddedConfig.Users[%s]: %q is not an nkey user public key", r, pub)
		}
		if other, ok := seen[pub]; ok {
			return fmt.Errorf("stream: EmbeddedConfig.Users: roles %s and %s share one key", other, r)
		}
		seen[pub] = r
	}
	return nil
}
