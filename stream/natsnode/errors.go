package natsnode

import "errors"

// ErrServerTooOld is returned by Connect when the server is older than
// 2.11 (per-message TTL, which leases depend on, came with 2.11). Its text
// still says "stream:", as it did before the connection code had a
// package of its own.
var ErrServerTooOld = errors.New("stream: nats-server too old (need 2.11 or newer)")

// ErrAddressInUse means an embedded server's listen address is taken,
// most often by another `jingwei serve` or nats-server.
var ErrAddressInUse = errors.New("stream: listen address in use")
