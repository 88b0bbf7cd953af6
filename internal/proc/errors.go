package proc

import "errors"

// ErrConfig is returned by Start when a required Config field is missing;
// the error names the field.
var ErrConfig = errors.New("proc: invalid config")
