package console

import "errors"

// ErrInvalidConfig is returned by New for a Config that misses a required
// field or has an invalid value; the message names the field.
var ErrInvalidConfig = errors.New("console: invalid config")

// ErrForbidden is why a state-changing request is refused: it did not come
// from the console's own page (cross-origin, a Host the console does not
// answer to, no or a wrong CSRF token). The response is 403 (421 for a
// Host) with the reason as text.
var ErrForbidden = errors.New("console: forbidden")

// ErrUnauthorized is why a request without the console's login is refused:
// no login cookie, or a wrong token at /login. The response is 401.
var ErrUnauthorized = errors.New("console: login required")
