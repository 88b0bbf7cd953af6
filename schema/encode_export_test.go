package schema

// EncodeEventReflect exposes the reference encoder to the external tests.
var EncodeEventReflect = encodeEventReflect
