package stream_test

import (
	"encoding/json"
	"testing"

	"github.com/jingwei/jingwei/schema"
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

// TestRequestMsgIDOf pins the content-bound request Msg-Id of
// docs/protocol.md §12: the session-scoped id, then the first 16 bytes
// of sha256 of the canonical {"arguments","task","tool"}. The same
// request in another member order or number spelling has the same id;
// another tool, task or arguments under the same request id does not.
func TestRequestMsgIDOf(t *testing.T) {
	// sha256(`{"arguments":{"qty":1,"sku":"A"},"task":"t-1","tool":"orders.create"}`) = f98d916d05baea573d44ca15bf6e0009…
	q := schema.Request{V: 1, RequestID: "r-1", Session: "s-1", Task: "t-1", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A","qty":1.0}`)}
	want := "request.s-1.a5fa777a3dc67268caea6eea038ba141.f98d916d05baea573d44ca15bf6e0009"
	if got := stream.RequestMsgIDOf(q); got != want {
		t.Fatalf("RequestMsgIDOf = %q, want %q", got, want)
	}
	for name, other := range map[string]func(*schema.Request){
		"tool":      func(r *schema.Request) { r.Tool = "orders.delete" },
		"task":      func(r *schema.Request) { r.Task = "t-2" },
		"arguments": func(r *schema.Request) { r.Arguments = json.RawMessage(`{"sku":"A","qty":2}`) },
	} {
		o := q
		other(&o)
		if stream.RequestMsgIDOf(o) == want {
			t.Errorf("another %s under r-1 has the same Msg-Id", name)
		}
	}
}
