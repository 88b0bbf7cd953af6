package tools

import "errors"

// Sentinel errors of the example tools.
var (
	// ErrKeyReused is returned (as a failed result) when orders.create sees
	// an operation key again with other arguments.
	ErrKeyReused = errors.New("tools: operation key reused with other arguments")
	// ErrSimulatedFailure is the failure FailAfterWrite injects.
	ErrSimulatedFailure = errors.New("tools: simulated failure after the order was written")
	// ErrUnknownSKU is returned by catalog.lookup for an SKU not in the
	// catalog.
	ErrUnknownSKU = errors.New("tools: unknown sku")
	// ErrUnfenced is returned by FenceLedger when the ledger stream predates
	// fencing (it has no <prefix>.ledger.> subject): its charges cannot be
	// fenced, and a reviewer must make sure the old writer is gone before
	// signing not_executed.
	ErrUnfenced = errors.New("tools: the ledger stream predates fencing")
	// ErrInvalidConfig is returned by New for a Config without JS.
	ErrInvalidConfig = errors.New("tools: invalid config")
)
