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
	// ErrInvalidConfig is returned by New for a Config without JS.
	ErrInvalidConfig = errors.New("tools: invalid config")
)
