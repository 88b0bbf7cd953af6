package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// ErrCredentials is returned by Run when an external deployment's
// credentials (Config.AuthDir) are missing, unreadable or refused by its
// server: the message names the role, its key file and what the server
// said. Retrying does not help, so the run stops before it starts
// anything.
var ErrCredentials = errors.New("chaos: credentials")

// externalRoles are the roles a run against an existing deployment plays:
// its own connections (admin reads back and sets up, the agent publishes,
// the reviewer reviews, the host prepares) and its child processes (the
// tool workers and the recovery worker).
var externalRoles = []access.Role{access.RoleAdmin, access.RoleAgent, access.RoleReviewer, access.RoleHost, access.RoleWorker, access.RoleRecoverer}

// roleConn is how role connects: its seed file or (Config.Operator) its
// creds file, in the run's credentials directory.
func (h *harness) roleConn(r access.Role) natsnode.ConnectConfig {
	if h.cfg.Operator {
		return natsnode.ConnectConfig{Creds: h.keys.CredsFile(r)}
	}
	return natsnode.ConnectConfig{NKeySeedFile: h.keys.SeedFile(r)}
}

// roleFile is the file roleConn connects role with.
func (h *harness) roleFile(r access.Role) string {
	c := h.roleConn(r)
	return c.Creds + c.NKeySeedFile
}

// roleArgs are the flags that connect a child process of the run as role
// (as 'jingwei setup', 'recover' or 'worker' take them): the credentials
// directory, where the recovery worker finds its plan-signing key and the
// tool workers the plan signers they trust, and with Config.Operator the
// role's creds file.
func (h *harness) roleArgs(r access.Role) []string {
	args := []string{"--auth", string(h.keys)}
	if h.cfg.Operator {
		args = append(args, "--creds", h.keys.CredsFile(r))
	}
	return args
}

// checkCredentials checks, before a run against an existing deployment
// starts anything, that the credentials directory holds every role's key,
// the recovery worker's plan-signing key and the planners the tool
// workers trust, and that the server takes each role's key: a wrong
// directory fails at once, naming the role, instead of every child
// process retrying until StartTimeout.
func (h *harness) checkCredentials(ctx context.Context) error {
	dir := h.keys
	for _, r := range externalRoles {
		if _, err := dir.KeyPair(r); err != nil {
			return fmt.Errorf("%w: role %s: %v (--auth names the deployment's credentials directory, as 'jingwei serve' or 'jingwei auth init' make it)", ErrCredentials, r, err)
		}
		if h.cfg.Operator {
			if _, err := os.Stat(dir.CredsFile(r)); err != nil {
				return fmt.Errorf("%w: role %s: %v (--operator connects with the creds 'jingwei auth creds' writes)", ErrCredentials, r, err)
			}
		}
	}
	if _, err := dir.PlannerKeyPair(); err != nil {
		return fmt.Errorf("%w: the recovery worker's plan-signing key %s: %v", ErrCredentials, dir.PlannerFile(), err)
	}
	if _, err := dir.Planners(); err != nil {
		return fmt.Errorf("%w: the plan signers the tool workers trust, %s: %v", ErrCredentials, dir.PlannersFile(), err)
	}
	for _, r := range externalRoles {
		cc := h.roleConn(r)
		cc.URL, cc.Name, cc.ConnectTimeout = h.url, "jingwei chaos check "+string(r), 10*time.Second
		nc, err := natsnode.Connect(ctx, cc)
		if err != nil {
			if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
				return fmt.Errorf("%w: %s refused role %s's credentials %s: %v (is --auth this deployment's credentials directory?)", ErrCredentials, h.url, r, h.roleFile(r), err)
			}
			return fmt.Errorf("%w: connect to %s as role %s: %v", ErrNotReady, h.url, r, err)
		}
		nc.Close()
	}
	return nil
}
