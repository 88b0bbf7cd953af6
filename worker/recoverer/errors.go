package recoverer

import (
	"errors"
)

// The recoverer's refusals are *schema.Error values: the codes of a
// history (schema.CodeUnknownCall, schema.CodeNeedsReview, …) and the
// service's (schema.CodeNotConfirmed, schema.CodeBadRequest); match them
// with the schema sentinels. The errors below are the package's own.

// ErrInvalidConfig is returned by New for a Config that misses a required
// field or has an invalid one; the message names the field.
var ErrInvalidConfig = errors.New("recoverer: invalid config")

// errCrash is what the test-only fault hook returns to simulate a crash
// between the plan's KV create and its publication.
var errCrash = errors.New("recoverer: simulated crash")

// errShortHistory is a history read that did not reach the event that
// needed it (a lagging replica): never classified.
var errShortHistory = errors.New("recoverer: history short of the event that needs it")

// errDeliveriesLost ends a classifier run whose consumer skipped
// deliveries (lost in transit): the events before the gap are settled and
// acknowledged, and the next run starts again from the ack floor.
var errDeliveriesLost = errors.New("recoverer: events consumer skipped deliveries")
