// Package side runs short functions alongside their caller on goroutines
// that live on between calls: a read made in parallel with another (the
// latest review beside the plan's KV get, a history's end beside its
// batch) would otherwise start a goroutine of its own, whose stack grows
// from the minimum by copying each time the read's decoding goes deep —
// in the racing plan-issuance benchmark a few percent of a prepare's CPU.
//
// Go runs f on an idle helper if one waits, else on a new goroutine that
// then stays to help for Idle before it exits, so nothing lingers in a
// process that stopped asking. f must not block for long (it holds a
// helper) and must recover its own panics if it can panic.
package side

import "time"

// Idle is how long a helper waits for more work before it exits.
const Idle = time.Second

// helpers hands work to idle helpers (unbuffered: a send succeeds only
// when one is waiting).
var helpers = make(chan func())

// Go runs f on a helper goroutine and returns at once.
func Go(f func()) {
	select {
	case helpers <- f:
	default:
		go help(f)
	}
}

// help runs f, then whatever Go hands it, until it has been idle for Idle.
func help(f func()) {
	f()
	t := time.NewTimer(Idle)
	defer t.Stop()
	for {
		select {
		case f := <-helpers:
			f()
			t.Reset(Idle)
		case <-t.C:
			return
		}
	}
}
