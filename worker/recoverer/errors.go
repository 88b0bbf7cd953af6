package recoverer

import (
	"errors"

	"github.com/jingwei/jingwei/schema"
)

// Error codes of the recovery worker and its service, on top of the codes of
// DESIGN §2 (schema.Code*). They travel as *schema.Error, so schema.CodeOf
// and the CLI's error JSON work for them too.
const (
	// CodeNotConfirmed: the call is still open while the session's lease is
	// live, so its history is not confirmed; prepare refuses rather than
	// fence a live writer. Ask again once the writer finished the call or
	// its lease expired.
	CodeNotConfirmed schema.Code = "not_confirmed"
	// CodeBadRequest: a service request that is not the expected JSON, or
	// names an invalid session or an empty call id.
	CodeBadRequest schema.Code = "bad_request"
	// CodeTimeout: jw.api.call did not see the request's tool.result within
	// Config.CallTimeout. The request may still run.
	CodeTimeout schema.Code = "timeout"
	// CodeInternal: anything else (the server unreachable, a failed write).
	CodeInternal schema.Code = "internal"
)

// Sentinels for errors.Is, one per code above.
var (
	ErrNotConfirmed = &schema.Error{Code: CodeNotConfirmed}
	ErrBadRequest   = &schema.Error{Code: CodeBadRequest}
	ErrTimeout      = &schema.Error{Code: CodeTimeout}
)

// ErrInvalidConfig is returned by New for a Config that misses a required
// field or has an invalid one; the message names the field.
var ErrInvalidConfig = errors.New("recoverer: invalid config")

// errCrash is what the test-only fault hook returns to simulate a crash
// between the plan's KV create and its publication.
var errCrash = errors.New("recoverer: simulated crash")
