package worker

import (
	"context"
	"regexp"
	"testing"
	"time"
)

// TestRandomIDs: both ids of one read are their prefix and 32 lower-case
// hex digits, differ from each other and from the next call's, and
// randomID has the same form.
func TestRandomIDs(t *testing.T) {
	callRe, keyRe := regexp.MustCompile(`^c-[0-9a-f]{32}$`), regexp.MustCompile(`^op-[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for range 1000 {
		c, k := randomIDs("c-", "op-")
		if !callRe.MatchString(c) || !keyRe.MatchString(k) {
			t.Fatalf("randomIDs = %q, %q", c, k)
		}
		if c[2:] == k[3:] || seen[c] || seen[k] {
			t.Fatalf("repeated id: %q, %q", c, k)
		}
		seen[c], seen[k] = true, true
	}
	if id := randomID("c-"); !callRe.MatchString(id) || seen[id] {
		t.Fatalf("randomID = %q", id)
	}
}

// TestWithFenceContext: the fenced context gives its token, passes every
// other key to its parent, and ends with its parent, as
// context.WithValue's would.
func TestWithFenceContext(t *testing.T) {
	type other struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), other{}, "v"))
	f := Fence{Session: "s-1", Epoch: 3, CallID: "c-1", Task: "t", Key: "op-1"}
	ctx := WithFence(parent, f)
	if got, ok := FencingToken(ctx); !ok || got != f {
		t.Fatalf("FencingToken = %+v, %v", got, ok)
	}
	if ctx.Value(other{}) != "v" {
		t.Fatalf("parent's value lost: %v", ctx.Value(other{}))
	}
	inner := WithFence(context.WithValue(ctx, other{}, "w"), Fence{Epoch: 4})
	if got, _ := FencingToken(inner); got.Epoch != 4 {
		t.Fatalf("inner token = %+v, want epoch 4", got)
	}
	if _, ok := FencingToken(parent); ok {
		t.Fatal("the parent has a token")
	}
	tctx, tcancel := context.WithTimeout(ctx, time.Hour)
	defer tcancel()
	cancel()
	<-tctx.Done() // the parent's cancellation reaches a context made from the fenced one
	if ctx.Err() != context.Canceled {
		t.Fatalf("fenced context after its parent was cancelled: %v", ctx.Err())
	}
}
