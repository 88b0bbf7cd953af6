package stream

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// CredsConfig configures KeyDir.IssueRoleCreds.
type CredsConfig struct {
	// Account signs the user JWTs: the account's own key pair, or one of
	// its signing keys (then set IssuerAccount). The account must be
	// trusted by the server's operator and have JetStream enabled.
	// Required.
	Account nkeys.KeyPair
	// IssuerAccount is the account's public key ("A…") when Account is a
	// signing key. Empty: Account is the account's own key.
	IssuerAccount string
	// Subjects names the prefixes of the permissions. The zero value is
	// the defaults.
	Subjects RoleConfig
	// Roles are the roles to issue credentials for. Nil means every role.
	Roles []Role
	// Expires is how long the credentials are valid from now. Zero: they
	// never expire.
	Expires time.Duration
}

// SafeJWTBytes is the largest user JWT a server with the default
// max_control_line (4 KiB, which bounds the CONNECT line that carries the
// JWT) takes with room to spare for the rest of the line: nats-server
// 2.15 took JWTs up to about 3,800 bytes from nats.go with a 28-byte
// connection name. A larger one needs max_control_line raised on the
// server (e.g. max_control_line: 16KB).
const SafeJWTBytes = 3750

// CredsFile is one file IssueRoleCreds wrote.
type CredsFile struct {
	// Role is the role.
	Role Role `json:"role"`
	// Path is <dir>/<role>.creds.
	Path string `json:"creds_file"`
	// PublicKey is the user's (the role's) public key.
	PublicKey string `json:"public_key"`
	// JWTBytes is the size of the user JWT; over SafeJWTBytes, servers
	// with the default max_control_line refuse the connection.
	JWTBytes int `json:"jwt_bytes"`
}

// IssueRoleCreds writes <dir>/<role>.creds for each role, for servers in
// operator mode (JWT accounts): a user JWT for the role's own nkey (its
// seed in <dir>/<role>.nk, created by Init) carrying the role's
// permissions (RoleConfig.JWTPermissions) and the tag jingwei-role:<role>,
// signed by cfg.Account, formatted with the seed by jwt.FormatUserConfig.
// Files are written 0600 and replace earlier ones atomically (credentials
// are issued again when the permissions change). It returns the files
// written.
func (d KeyDir) IssueRoleCreds(cfg CredsConfig) ([]CredsFile, error) {
	if cfg.Account == nil {
		return nil, fmt.Errorf("%w: IssueRoleCreds: no account key", ErrBadKey)
	}
	signer, err := cfg.Account.PublicKey()
	if err != nil || !nkeys.IsValidPublicAccountKey(signer) {
		return nil, fmt.Errorf("%w: the signing key is not an account key (want a seed starting SA…)", ErrBadKey)
	}
	if cfg.IssuerAccount != "" && !nkeys.IsValidPublicAccountKey(cfg.IssuerAccount) {
		return nil, fmt.Errorf("%w: IssuerAccount %q is not an account public key", ErrBadKey, cfg.IssuerAccount)
	}
	if err := cfg.Subjects.Validate(); err != nil {
		return nil, err
	}
	roles := cfg.Roles
	if len(roles) == 0 {
		roles = Roles
	}
	var out []CredsFile
	for _, r := range roles {
		if !r.Valid() {
			return out, fmt.Errorf("stream: IssueRoleCreds: %w: %q", ErrUnknownRole, r)
		}
		kp, err := d.KeyPair(r)
		if err != nil {
			return out, err
		}
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		uc := jwt.NewUserClaims(pub)
		uc.Name = "jingwei " + string(r)
		uc.Tags.Add("jingwei-role:" + string(r))
		uc.Permissions = cfg.Subjects.JWTPermissions(r)
		uc.IssuerAccount = cfg.IssuerAccount
		if cfg.Expires > 0 {
			uc.Expires = time.Now().Add(cfg.Expires).Unix()
		}
		vr := jwt.CreateValidationResults()
		uc.Validate(vr)
		if vr.IsBlocking(true) {
			return out, fmt.Errorf("stream: user JWT for %s: %v", r, vr.Errors())
		}
		token, err := uc.Encode(cfg.Account)
		if err != nil {
			return out, fmt.Errorf("stream: sign user JWT for %s: %w", r, err)
		}
		creds, err := jwt.FormatUserConfig(token, seed)
		if err != nil {
			return out, fmt.Errorf("stream: creds for %s: %w", r, err)
		}
		path := d.CredsFile(r)
		if err := replaceFile(path, creds); err != nil {
			return out, err
		}
		out = append(out, CredsFile{Role: r, Path: path, PublicKey: pub, JWTBytes: len(token)})
	}
	return out, nil
}

// replaceFile writes b to a 0600 temporary file next to path, fsyncs it
// and renames it over path.
func replaceFile(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("stream: write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
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
