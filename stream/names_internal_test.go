package stream

import (
	"strconv"
	"testing"
)

// TestNames: the names a topology hands out are docs/protocol.md §3's, for
// any prefix, and a partitioned store's stored subjects carry the
// session's partition.
func TestNames(t *testing.T) {
	topo := &Topology{Prefix: "acme-jw", cfg: TopologyConfig{Prefix: "acme-jw", Partitions: 8}}
	n := topo.Names()
	p := Partition("s-1", 8)
	for _, c := range [][2]string{
		{n.StreamName("EVENTS"), "ACME_JW_EVENTS"},
		{n.PlanConsumerName(3), "ACME_JW_toolworker_plans_p3"},
		{n.RequestConsumerName(3), "ACME_JW_requests_p3"},
		{n.ApprovalConsumerName(), "ACME_JW_toolworker_approvals"},
		{n.EventsSubject("s-1"), "acme-jw.events.s-1"},
		{n.RequestsSubject("s-1"), "acme-jw.requests.s-1"},
		{n.RequestsStoredSubject("s-1"), "acme-jw.requests." + strconv.Itoa(p) + ".s-1"},
		{n.RequestsPartitionSubject(3), "acme-jw.requests.3.*"},
		{n.PlansSubject("s-1"), "acme-jw.plans.s-1"},
		{n.PlansStoredSubject("s-1"), "acme-jw.plans." + strconv.Itoa(p) + ".s-1"},
		{n.PlansPartitionSubject(3), "acme-jw.plans.3.*"},
		{n.ReviewsSubject("s-1"), "acme-jw.reviews.s-1"},
		{n.AssessmentsSubject("s-1"), "acme-jw.assessments.s-1"},
		{n.AnswersSubject("s-1"), "acme-jw.answers.s-1"},
		{n.APISubject("call"), "acme-jw.api.call"},
		{n.ApprovalsSubject("s-1"), "acme-jw.approvals.s-1"},
		{n.ApprovalRequestsSubject("s-1"), "acme-jw.approvals.s-1.request"},
	} {
		if got, want := c[0], c[1]; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if n.Partitions() != 8 || n.PartitionOf("s-1") != p {
		t.Errorf("partitions %d, partition of s-1 %d, want 8 and %d", n.Partitions(), n.PartitionOf("s-1"), p)
	}
	// An unpartitioned store (an older deployment opened read-only).
	old := (&Topology{Prefix: "jw"}).Names()
	if got := old.RequestsStoredSubject("s-1"); got != "jw.requests.s-1" {
		t.Errorf("unpartitioned stored subject %q", got)
	}
}
