package recovery_test

import (
	"slices"
	"testing"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

func TestOpenIn(t *testing.T) {
	call := func(seq, epoch uint64, id string) schema.Event {
		return schema.Event{Seq: seq, Epoch: epoch, Type: schema.TypeCall, Call: &schema.Call{CallID: id}}
	}
	result := func(seq, epoch uint64, id string) schema.Event {
		return schema.Event{Seq: seq, Epoch: epoch, Type: schema.TypeResult, Result: &schema.Result{CallID: id}}
	}
	fence := func(seq, epoch uint64) schema.Event {
		return schema.Event{Seq: seq, Epoch: epoch, Type: schema.TypeFenced, Fence: &schema.Fence{Epoch: epoch}}
	}
	tests := []struct {
		name   string
		h      []schema.Event
		before uint64
		want   []string
	}{
		{"empty", nil, 0, []string{}},
		{"open in order", []schema.Event{call(1, 1, "b"), call(2, 1, "a"), call(3, 1, "c")}, 0, []string{"b", "a", "c"}},
		{"a result closes", []schema.Event{call(1, 1, "a"), call(2, 1, "b"), result(3, 1, "a")}, 0, []string{"b"}},
		{"a newer fence closes older epochs", []schema.Event{call(1, 1, "a"), fence(2, 2), call(3, 2, "b")}, 0, []string{"b"}},
		{"a fence of the same epoch closes nothing", []schema.Event{call(1, 2, "a"), fence(2, 2)}, 0, []string{"a"}},
		{"just before the fence", []schema.Event{call(1, 1, "a"), call(2, 1, "b"), result(3, 1, "b"), fence(4, 2)}, 4, []string{"a"}},
		{"a stray result changes nothing", []schema.Event{result(1, 1, "x"), call(2, 1, "a")}, 0, []string{"a"}},
		{"a call id opened twice is one call", []schema.Event{call(1, 1, "a"), call(2, 1, "b"), call(3, 1, "a")}, 0, []string{"b", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := recovery.OpenIn(tt.h, tt.before); !slices.Equal(got, tt.want) {
				t.Fatalf("OpenIn = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestOpenCallsFenceReportsClosed: Fence passes every call it closes, with
// its value, in the order the calls were opened.
func TestOpenCallsFenceReportsClosed(t *testing.T) {
	var o recovery.OpenCalls[int]
	o.Open("c", 1, 3)
	o.Open("a", 1, 1)
	o.Open("new", 3, 9)
	o.Open("b", 2, 2)
	var closed []string
	var vals []int
	o.Fence(3, func(id string, v int) { closed, vals = append(closed, id), append(vals, v) })
	if !slices.Equal(closed, []string{"c", "a", "b"}) || !slices.Equal(vals, []int{3, 1, 2}) || o.Len() != 1 {
		t.Fatalf("closed %v %v, %d left", closed, vals, o.Len())
	}
	if v, ok := o.Get("new"); !ok || v != 9 {
		t.Fatalf("Get(new) = %d %v", v, ok)
	}
	if _, ok := o.Close("a"); ok {
		t.Fatal("a call closed twice")
	}
}
