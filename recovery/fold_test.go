package recovery_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestFoldReviews: completed is final; otherwise the latest trusted review
// decides; reviews the caller did not accept change nothing.
func TestFoldReviews(t *testing.T) {
	const (
		ne = schema.VerdictNotExecuted
		co = schema.VerdictCompleted
		un = schema.VerdictUncertain
	)
	untrusted := errors.New("not signed by a trusted reviewer key")
	// entry: a verdict, trusted unless bad
	type entry struct {
		v   schema.Verdict
		bad bool
	}
	tests := []struct {
		name    string
		entries []entry
		decides int
		final   bool
		// codes per entry: "" stands, "err" the caller's own error
		codes []string
	}{
		{"none", nil, -1, false, []string{}},
		{"one not_executed", []entry{{v: ne}}, 0, false, []string{""}},
		{"one completed", []entry{{v: co}}, 0, true, []string{""}},
		{"latest decides", []entry{{v: ne}, {v: un}}, 1, false, []string{"", ""}},
		{"latest decides, lifted again", []entry{{v: un}, {v: ne}}, 1, false, []string{"", ""}},
		{"completed after not_executed", []entry{{v: ne}, {v: co}}, 1, true, []string{"", ""}},
		{"not_executed after completed", []entry{{v: co}, {v: ne}}, 0, true, []string{"", "review_conflict"}},
		{"uncertain after completed", []entry{{v: co}, {v: un}}, 0, true, []string{"", "review_conflict"}},
		{"completed again", []entry{{v: co}, {v: ne}, {v: co}}, 2, true, []string{"", "review_conflict", ""}},
		{"conflicts keep coming", []entry{{v: ne}, {v: co}, {v: ne}, {v: un}, {v: ne}}, 1, true, []string{"", "", "review_conflict", "review_conflict", "review_conflict"}},
		{"untrusted completed is not final", []entry{{v: co, bad: true}, {v: ne}}, 1, false, []string{"err", ""}},
		{"untrusted not_executed after completed", []entry{{v: co}, {v: ne, bad: true}}, 0, true, []string{"", "err"}},
		{"untrusted only", []entry{{v: ne, bad: true}, {v: co, bad: true}}, -1, false, []string{"err", "err"}},
		{"untrusted latest does not decide", []entry{{v: un}, {v: ne, bad: true}}, 0, false, []string{"", "err"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var es []recovery.ReviewEntry
			for i, e := range tc.entries {
				r := *review(e.v)
				r.Evidence = "ticket-" + string(rune('a'+i))
				re := recovery.ReviewEntry{Review: r, Seq: uint64(10 + i)}
				if e.bad {
					re.Err = untrusted
				}
				es = append(es, re)
			}
			f := recovery.FoldReviews(testSession, "c-1", es)
			if f.Decides != tc.decides || f.Final != tc.final || len(f.Rejected) != len(es) {
				t.Fatalf("decides %d final %v (%d rejected), want %d %v", f.Decides, f.Final, len(f.Rejected), tc.decides, tc.final)
			}
			if tc.decides < 0 {
				if f.Review != nil {
					t.Errorf("review %+v with nothing deciding", f.Review)
				}
			} else if f.Review == nil || *f.Review != es[tc.decides].Review {
				t.Errorf("review %+v, want entry %d", f.Review, tc.decides)
			}
			for i, want := range tc.codes {
				err := f.Rejected[i]
				switch want {
				case "":
					if err != nil {
						t.Errorf("entry %d rejected: %v", i, err)
					}
				case "err":
					if err != untrusted {
						t.Errorf("entry %d: %v, want the caller's error", i, err)
					}
				default:
					if string(schema.CodeOf(err)) != want || !errors.Is(err, schema.ErrReviewConflict) {
						t.Fatalf("entry %d: %v, want %s", i, err, want)
					}
					// the message names both reviews
					for _, m := range []string{"seq " + strconv.Itoa(10+i), "ticket-" + string(rune('a'+i)), "completed", `"c-1"`} {
						if !strings.Contains(err.Error(), m) {
							t.Errorf("entry %d: message %q does not mention %q", i, err, m)
						}
					}
				}
			}
		})
	}
}

// TestFoldReviewsOtherCall: a review of another call or session, or with an
// unknown verdict, never counts, even if the caller let it through.
func TestFoldReviewsOtherCall(t *testing.T) {
	mod := func(f func(r *schema.Review)) recovery.ReviewEntry {
		r := *review(schema.VerdictCompleted)
		f(&r)
		return recovery.ReviewEntry{Review: r}
	}
	es := []recovery.ReviewEntry{
		mod(func(r *schema.Review) { r.CallID = "c-2" }),
		mod(func(r *schema.Review) { r.Session = "s-2" }),
		mod(func(r *schema.Review) { r.Verdict = "probably_fine" }),
		{Review: *review(schema.VerdictNotExecuted)},
	}
	f := recovery.FoldReviews(testSession, "c-1", es)
	if f.Decides != 3 || f.Final {
		t.Fatalf("decides %d final %v", f.Decides, f.Final)
	}
	for i, m := range []string{`"c-2"`, `"s-2"`, "probably_fine"} {
		if err := f.Rejected[i]; schema.CodeOf(err) != schema.CodeInvalidReview || !strings.Contains(err.Error(), m) || !strings.Contains(err.Error(), "index "+strconv.Itoa(i)) {
			t.Errorf("entry %d: %v", i, err)
		}
	}
}

// TestFoldReviewsReplay: signed reviews off the wire. After a trusted
// completed review, the older not_executed review published again byte
// for byte is rejected, and PrepareRetry with the fold's review refuses;
// before it, the same bytes lift needs_review.
func TestFoldReviewsReplay(t *testing.T) {
	k := newKeys(t)
	notExec, err := json.Marshal(signReview(t, k.reviewer, *review(schema.VerdictNotExecuted)))
	if err != nil {
		t.Fatal(err)
	}
	done, _ := json.Marshal(signReview(t, k.reviewer, *review(schema.VerdictCompleted)))
	forged := []byte(strings.Replace(string(done), `"completed"`, `"not_executed"`, 1)) // changed after signing
	judge := func(msgs ...[]byte) []recovery.ReviewEntry {
		var es []recovery.ReviewEntry
		for i, b := range msgs {
			r, err := recovery.DecodeReview(b)
			if err == nil {
				err = recovery.VerifyReview(r, k.reviewers)
			}
			es = append(es, recovery.ReviewEntry{Review: r, Err: err, Seq: uint64(i + 1)})
		}
		return es
	}
	prepare := func(f recovery.ReviewFold) error {
		_, err := recovery.PrepareRetry(nonIdemHistory(), "c-1", f.Review, recovery.RequireSignedReview(k.reviewers))
		return err
	}

	f := recovery.FoldReviews(testSession, "c-1", judge(notExec))
	if err := prepare(f); err != nil {
		t.Fatalf("not_executed alone: %v", err)
	}
	es := judge(notExec, done, notExec, forged)
	f = recovery.FoldReviews(testSession, "c-1", es)
	if f.Decides != 1 || !f.Final {
		t.Fatalf("decides %d final %v: %v", f.Decides, f.Final, f.Rejected)
	}
	if schema.CodeOf(f.Rejected[2]) != schema.CodeReviewConflict || !strings.Contains(f.Rejected[2].Error(), "seq 3") {
		t.Errorf("replayed not_executed: %v", f.Rejected[2])
	}
	if !errors.Is(f.Rejected[3], recovery.ErrBadSignature) {
		t.Errorf("forged review: %v", f.Rejected[3])
	}
	if !reflect.DeepEqual(es[0].Review, es[2].Review) {
		t.Fatal("the replay is not the same review")
	}
	if err := prepare(f); schema.CodeOf(err) != schema.CodeCompleted {
		t.Errorf("PrepareRetry after completed: %v", err)
	}
}
