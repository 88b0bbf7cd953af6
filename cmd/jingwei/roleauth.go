package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream/access"
)

// defaultAuthDir is where serve keeps the role credentials (DATA/auth
// with the default --data); client commands use it when it exists and no
// credentials are given.
const defaultAuthDir = ".jingwei/auth"

// commandRole is the role each command connects as (docs/protocol.md §4): its key
// is <auth dir>/<role>.nk unless --creds or --nkey says otherwise.
var commandRole = map[string]access.Role{
	"call":    access.RoleAgent,
	"review":  access.RoleReviewer,
	"status":  access.RoleHost,
	"retry":   access.RoleHost,
	"export":  access.RoleHost,
	"inspect": access.RoleHost,
	"plan":    access.RoleHost,
	"worker":  access.RoleWorker,
	"recover": access.RoleRecoverer,
}

// authDir returns the role-credentials directory the flags name: --auth
// (or $JINGWEI_AUTH), else ./.jingwei/auth when it exists, else "".
func (n *natsFlags) authDir() string {
	if n.auth != "" {
		return n.auth
	}
	if st, err := os.Stat(defaultAuthDir); err == nil && st.IsDir() {
		return defaultAuthDir
	}
	return ""
}

// roleKeyFile returns the nkey seed file the command connects with when
// neither --creds nor --nkey is given: <auth dir>/<role>.nk, checked (it
// must exist and be private). "" means connect without credentials.
func (n *natsFlags) roleKeyFile(command string) (string, error) {
	if n.creds != "" || n.nkey != "" {
		return n.nkey, nil
	}
	dir := n.authDir()
	role, ok := commandRole[command]
	if dir == "" || !ok {
		return "", nil
	}
	if _, err := access.KeyDir(dir).KeyPair(role); err != nil {
		return "", fmt.Errorf("role %s: %w", role, err)
	}
	return access.KeyDir(dir).SeedFile(role), nil
}

// plannerKey returns the plan-signing key of a recovery worker: --planner-key
// FILE, else <auth dir>/planner.nk.
func (n *natsFlags) plannerKey(file string) (nkeys.KeyPair, string, error) {
	if file == "" {
		dir := n.authDir()
		if dir == "" {
			return nil, "", errors.New("no plan-signing key: give --planner-key FILE (jingwei keys new --out FILE makes one) or --auth DIR holding planner.nk (jingwei auth init)")
		}
		kp, err := access.KeyDir(dir).PlannerKeyPair()
		return kp, access.KeyDir(dir).PlannerFile(), err
	}
	kp, err := access.ReadSeedFile(file)
	if err != nil {
		return nil, file, err
	}
	if pub, _ := kp.PublicKey(); !nkeys.IsValidPublicUserKey(pub) {
		return nil, file, fmt.Errorf("%s is not an nkey user seed (want SU…)", file)
	}
	return kp, file, nil
}

// trustedPlanners returns the plan signers a tool worker accepts:
// --trust-planners FILE (one public key per line), else <auth
// dir>/planners; nil when neither is there.
func (n *natsFlags) trustedPlanners(file string) (recovery.TrustedKeys, string, error) {
	if file == "" {
		dir := n.authDir()
		if dir == "" {
			return nil, "", nil
		}
		keys, err := access.KeyDir(dir).Planners()
		if err != nil {
			return nil, access.KeyDir(dir).PlannersFile(), err
		}
		t, err := recovery.NewTrustedKeys(keys...)
		return t, access.KeyDir(dir).PlannersFile(), err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, file, err
	}
	t, err := recovery.ParseTrustedKeys(b)
	return t, file, err
}

// isAuthError reports an error that more retries or a running server would
// not fix: refused credentials, a missing or unreadable key file.
func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, os.ErrNotExist) ||
		errors.Is(err, os.ErrPermission) || errors.Is(err, access.ErrInsecureFile) || errors.Is(err, access.ErrBadKey)
}
