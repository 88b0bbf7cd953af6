package stream_test

import (
	"testing"

	"github.com/jingwei/jingwei/stream"
)

// TestRequestMsgID pins the request Msg-Id of docs/protocol.md §12 (other
// implementations publish requests with it): scoped by session, the
// request id hashed.
func TestRequestMsgID(t *testing.T) {
	// sha256("r-1") = a5fa777a3dc67268caea6eea038ba141…: its first 16 bytes in hex.
	got := stream.RequestMsgID("s-1", "r-1")
	want := "request.s-1.a5fa777a3dc67268caea6eea038ba141"
	if got != want {
		t.Fatalf("RequestMsgID(s-1, r-1) = %q, want %q", got, want)
	}
	if a, b := stream.RequestMsgID("s-a", "r-1"), stream.RequestMsgID("s-b", "r-1"); a == b {
		t.Fatalf("r-1 of two sessions share the Msg-Id %q", a)
	}
}
