package worker

import (
	"time"

	"github.com/jingwei/jingwei/schema"
)

// Observer is told what a Runtime writes to its session log, for metrics
// (package metrics implements it). Its method is called on the call's
// goroutine, after the append returned: it must be quick and safe for
// concurrent use.
type Observer interface {
	// Appended reports one append of ev (stamped: Session, At, Type and
	// its body set; Seq not) that took d; err is the append's error (nil
	// when the event is on the log). A call's start is either a
	// tool.started or, in the combined form, its tool.call with
	// Call.Started set (docs/protocol.md §8): an observer counting starts
	// counts both.
	Appended(ev schema.Event, d time.Duration, err error)
}

// ResultObserver is an Observer that is also told the tool of each
// tool.result the runtime appends: a result does not name its tool, and
// its tool.call may have been recorded by another process (a call resumed
// after a takeover, such as one that waited for approval). A runtime
// whose Observer implements it reports tool.result appends through
// AppendedResult instead of Appended.
type ResultObserver interface {
	Observer
	// AppendedResult is Appended for a tool.result of a call of tool.
	AppendedResult(ev schema.Event, tool string, d time.Duration, err error)
}
