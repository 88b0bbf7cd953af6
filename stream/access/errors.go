package access

import "errors"

// Sentinel errors of the keys, credentials and roles; match them with
// errors.Is. Their text still says "stream:": they were stream's before
// the permission model became a package of its own, and logs and scripts
// may match on it.
var (
	// ErrInsecureFile is returned for a credentials directory or key file
	// that other users could read or change (group or world permission
	// bits): the error names the file and the chmod that fixes it. Nothing
	// is read from or written to it.
	ErrInsecureFile = errors.New("stream: credentials readable or writable by other users")

	// ErrBadKey is returned for a key file that holds no nkey seed of the
	// kind wanted (a user seed for a role, an account seed to sign
	// credentials), a planners line that is no user public key, or a
	// credentials path that is not a regular file or directory.
	ErrBadKey = errors.New("stream: not the key wanted")

	// ErrUnknownRole is returned for a role that is not one of Roles.
	ErrUnknownRole = errors.New("stream: unknown role")
)
