package ledger

import (
	"bytes"
	"testing"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/tools"
)

func TestLatestEpoch(t *testing.T) {
	h := []schema.Event{{Epoch: 2}, {Epoch: 3, Fence: &schema.Fence{Epoch: 5}}, {Epoch: 4}}
	if got := LatestEpoch(h); got != 5 {
		t.Errorf("LatestEpoch = %d, want the fence's 5", got)
	}
	if got := LatestEpoch(nil); got != 0 {
		t.Errorf("LatestEpoch(nil) = %d", got)
	}
}

func TestCharges(t *testing.T) {
	all := []tools.Charge{{Seq: 1, Session: "s-1", CallID: "a"}, {Seq: 2, Session: "s-2", CallID: "b"}, {Seq: 3, Session: "s-1", CallID: "c"}}
	for _, tc := range []struct {
		session, call string
		want          []uint64
	}{{"", "", []uint64{1, 2, 3}}, {"s-1", "", []uint64{1, 3}}, {"s-1", "c", []uint64{3}}, {"s-2", "a", nil}} {
		got := Charges(all, tc.session, tc.call)
		if got == nil || len(got) != len(tc.want) {
			t.Fatalf("Charges(%q, %q) = %v, want seqs %v", tc.session, tc.call, got, tc.want)
		}
		for i := range got {
			if got[i].Seq != tc.want[i] {
				t.Errorf("Charges(%q, %q) = %v, want seqs %v", tc.session, tc.call, got, tc.want)
			}
		}
	}
}

func TestWriteCharges(t *testing.T) {
	var b bytes.Buffer
	WriteCharges(&b, nil)
	WriteCharges(&b, []tools.Charge{{Seq: 7, Session: "s-1", CallID: "c-1", Epoch: 2, Account: "acct", AmountCents: 500}})
	want := "no charges\nTOOLS_LEDGER seq 7: 500 cents to acct by call c-1 (session s-1, epoch 2)\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	f := Fence{Session: "s-1", Subject: "tools.ledger.s-1", Epoch: 3}
	if f.String() != "fence of tools.ledger.s-1 raised to epoch 3: a writer of session s-1 below epoch 3 can no longer charge" {
		t.Errorf("Fence.String = %q", f)
	}
}
