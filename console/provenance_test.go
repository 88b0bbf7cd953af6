package console

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// TestReviewsShowProvenance: the reviews table says which review is a
// person's and which a probe's (and which probe), and a probe's undecided
// answer reads as evidence only; a plan resting on a probe's review names
// the probe.
func TestReviewsShowProvenance(t *testing.T) {
	_, nc, _ := streamtest.Start(t)
	c, err := New(Config{Reviewer: nc, Host: nc, Token: "a-test-token-of-some-length"})
	if err != nil {
		t.Fatal(err)
	}
	person := schema.Review{V: 1, Session: "s-1", CallID: "c-1", Operator: "alice@ops", Evidence: "statement", Verdict: schema.VerdictCompleted}
	probe := schema.Review{V: 1, Session: "s-1", CallID: "c-1", Operator: "prober", Evidence: "ledger: nothing", Verdict: schema.VerdictUncertain, Probe: "payments.lookup"}
	data := struct {
		ReviewsErr *problem
		Reviews    []service.ReviewCheck
	}{Reviews: []service.ReviewCheck{
		{Seq: 1, Review: probe, Source: "probe", Accepted: true},
		{Seq: 2, Review: person, Source: "person", Accepted: true, Decides: true},
	}}
	var b bytes.Buffer
	if err := c.tmpl.ExecuteTemplate(&b, "reviews", data); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{`<td class="source">probe payments.lookup</td>`, `<td class="source">person</td>`, "evidence only (the probe could not decide)", "accepted, decides"} {
		if !strings.Contains(page, want) {
			t.Errorf("reviews table lacks %q:\n%s", want, page)
		}
	}
	// A review naming a probe is not the console's to publish.
	signed := []byte(`{"v":1,"session":"s-1","call_id":"c-1","operator":"alice","evidence":"e","verdict":"not_executed","probe":"payments.lookup"}`)
	if _, err := c.checkReview("s-1", "c-1", signed); schema.CodeOf(err) != schema.CodeInvalidReview || !strings.Contains(err.Error(), "probe") {
		t.Fatalf("a review naming a probe through the console: %v, want invalid_review", err)
	}
}
