package schema

// Limits of docs/protocol.md §14.
const (
	// MaxHistoryEvents is the most events a session history may hold.
	MaxHistoryEvents = 100_000
	// MaxHistoryBytes is the most bytes a serialized history may take
	// (JSON Lines, newlines included).
	MaxHistoryBytes = 16 << 20
	// MaxFieldBytes bounds an operation key, call id, contract revision,
	// request id, and a review's operator and evidence.
	MaxFieldBytes = 1024
	// MaxSessionBytes bounds a session id.
	MaxSessionBytes = 128
	// MaxTaskBytes bounds the task id of a tool request.
	MaxTaskBytes = 128
	// MaxResultErrorBytes bounds the error text a runtime records in a
	// tool.result (longer text is cut at a UTF-8 boundary): with the
	// tool's output limit it bounds the result, whose room is kept on
	// the log from the call's tool.call on (docs/protocol.md §14).
	MaxResultErrorBytes = 1024
	// MaxEpoch is the highest epoch an event or fence may carry: 2^53-1,
	// so that every JSON reader (IEEE doubles included) reads it exactly.
	MaxEpoch = 1<<53 - 1
)

// Limits bounds what a history reader accepts. The zero value means the
// defaults of docs/protocol.md §14 (see DefaultLimits).
type Limits struct {
	// MaxEvents defaults to MaxHistoryEvents.
	MaxEvents int
	// MaxBytes defaults to MaxHistoryBytes.
	MaxBytes int64
}

// DefaultLimits are the limits of docs/protocol.md §14.
var DefaultLimits = Limits{MaxEvents: MaxHistoryEvents, MaxBytes: MaxHistoryBytes}

// WithDefaults returns l with zero fields replaced by the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxEvents <= 0 {
		l.MaxEvents = MaxHistoryEvents
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = MaxHistoryBytes
	}
	return l
}

// ValidSession reports whether s is a valid session id: 1–128 bytes of
// [A-Za-z0-9_-], so it can be used as a NATS subject token and a KV key.
func ValidSession(s string) bool { return validToken(s, MaxSessionBytes) }

// validToken reports whether s is 1 to max bytes of [A-Za-z0-9_-].
func validToken(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidTask reports whether s is a valid task id for a tool request: 1–128
// bytes of [A-Za-z0-9_-], like a session id, because it is part of a KV
// key (jw_budget's <session>.<task>).
func ValidTask(s string) bool { return validToken(s, MaxTaskBytes) }
