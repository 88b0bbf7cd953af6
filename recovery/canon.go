package recovery

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/jingwei/jingwei/schema"
)

// canonical and digestOf are the one place recovery canonicalizes JSON:
// RFC 8785 with exact numbers, by schema. digestOf(canonical(b)) is
// schema.ArgsDigest(b).
func canonical(b []byte) ([]byte, error) { return schema.Canonical(b) }

func digestOf(canon []byte) string {
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:])
}
