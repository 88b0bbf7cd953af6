//go:build !jw_notracing

package tracing

// HooksCompiled reports whether this build has jingwei's tracing hooks
// (every build but one made with -tags jw_notracing).
const HooksCompiled = true

// load returns the tracer in use; nil while tracing is off.
func load() *state { return current.Load() }
