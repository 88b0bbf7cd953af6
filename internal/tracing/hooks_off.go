//go:build jw_notracing

package tracing

// HooksCompiled reports whether this build has jingwei's tracing hooks:
// not this one. Built with -tags jw_notracing, tracing is never on
// (load is the constant nil, so the compiler drops the hooks' bodies
// after the check): the baseline `jingwei bench` runs runtime calls
// against to measure what the hooks cost with no OTEL_* set. Not for
// deployment.
const HooksCompiled = false

// load returns nil: this build never traces.
func load() *state { return nil }
