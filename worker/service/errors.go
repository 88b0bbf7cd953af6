package service

import "errors"

// ErrNoService is what a Client returns when nobody serves the endpoint
// asked (no responders): neither `jingwei serve` nor `jingwei recover` /
// `jingwei worker` runs against the server.
var ErrNoService = errors.New("service: no jingwei service answers")

// ErrUnexpectedAnswer is what a Client returns for an answer that is
// neither an error body nor the body the endpoint answers with.
var ErrUnexpectedAnswer = errors.New("service: unexpected answer")

// ErrInvalidConfig is returned by Start for a Config without a connection
// or with an endpoint without a handler.
var ErrInvalidConfig = errors.New("service: invalid config")
