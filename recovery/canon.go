package recovery

import (
	"encoding/json"

	"github.com/jingwei/jingwei/schema"
)

// canonical and argsDigest are the one place recovery canonicalizes JSON:
// RFC 8785 with exact numbers, by schema.
func canonical(b []byte) ([]byte, error) { return schema.Canonical(b) }

func argsDigest(args json.RawMessage) (string, error) { return schema.ArgsDigest(args) }
