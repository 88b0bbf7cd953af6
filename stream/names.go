package stream

import "strconv"

// Names is the topology's names: its streams, consumers and subjects, and
// the partition of a session. Get it with Topology.Names.
type Names struct{ t *Topology }

// StreamName returns the stream name for a kind ("EVENTS" → "JW_EVENTS").
func (n Names) StreamName(kind string) string {
	return streamName(n.t.Prefix, kind)
}

// PlanConsumerName is the durable consumer on JW_PLANS of a partition
// (<PREFIX>_toolworker_plans_p<partition>), held by the partition's owner.
func (n Names) PlanConsumerName(partition int) string {
	return n.StreamName("toolworker_plans_p" + strconv.Itoa(partition))
}

// RequestConsumerName is the durable consumer on JW_REQUESTS of a
// partition (<PREFIX>_requests_p<partition>), created by the partition's
// owner.
func (n Names) RequestConsumerName(partition int) string {
	return n.StreamName("requests_p" + strconv.Itoa(partition))
}

// EventsSubject returns jw.events.<session>.
func (n Names) EventsSubject(session string) string {
	return n.t.Prefix + ".events." + session
}

// RequestsSubject returns jw.requests.<session>: where a request is
// published. The server stores it as RequestsStoredSubject.
func (n Names) RequestsSubject(session string) string {
	return n.t.Prefix + ".requests." + session
}

// RequestsStoredSubject returns jw.requests.<partition>.<session>: the
// subject JW_REQUESTS stores a request of the session under (the
// stream's subject transform adds the partition).
func (n Names) RequestsStoredSubject(session string) string {
	return n.storedSubject("requests", session)
}

// RequestsPartitionSubject returns jw.requests.<partition>.*: every
// stored request of one partition (the filter of its consumer).
func (n Names) RequestsPartitionSubject(partition int) string {
	return n.t.Prefix + ".requests." + strconv.Itoa(partition) + ".*"
}

// PlansStoredSubject returns jw.plans.<partition>.<session>: the subject
// JW_PLANS stores a plan of the session under.
func (n Names) PlansStoredSubject(session string) string {
	return n.storedSubject("plans", session)
}

// PlansPartitionSubject returns jw.plans.<partition>.*: every stored plan
// of one partition.
func (n Names) PlansPartitionSubject(partition int) string {
	return n.t.Prefix + ".plans." + strconv.Itoa(partition) + ".*"
}

// storedSubject is <prefix>.<kind>.<partition>.<session>, or
// <prefix>.<kind>.<session> on an unpartitioned store (an older
// deployment opened read-only).
func (n Names) storedSubject(kind, session string) string {
	t := n.t
	if t.cfg.Partitions == 0 {
		return t.Prefix + "." + kind + "." + session
	}
	return t.Prefix + "." + kind + "." + strconv.Itoa(n.PartitionOf(session)) + "." + session
}

// Partitions returns the number of partitions the sessions are divided
// into (TopologyConfig.Partitions, or what the streams say for a topology
// opened read-only; 0 for an unpartitioned older store).
func (n Names) Partitions() int {
	return n.t.cfg.Partitions
}

// PartitionOf returns the partition of a session: Partition(session,
// t.Partitions()), the partition the server's subject transform files its
// requests and plans under.
func (n Names) PartitionOf(session string) int {
	return Partition(session, n.t.cfg.Partitions)
}

// ReviewsSubject returns jw.reviews.<session>.
func (n Names) ReviewsSubject(session string) string {
	return ReviewsSubject(n.t.Prefix, session)
}

// PlansSubject returns jw.plans.<session>.
func (n Names) PlansSubject(session string) string {
	return n.t.Prefix + ".plans." + session
}

// AssessmentsSubject returns jw.assessments.<session>.
func (n Names) AssessmentsSubject(session string) string {
	return n.t.Prefix + ".assessments." + session
}

// AnswersSubject returns jw.answers.<session>.
func (n Names) AnswersSubject(session string) string {
	return n.t.Prefix + ".answers." + session
}

// APISubject returns jw.api.<endpoint> (the service's request subjects).
func (n Names) APISubject(endpoint string) string {
	return APISubject(n.t.Prefix, endpoint)
}

// ApprovalsSubject returns jw.approvals.<session>, where the signed
// answers to the session's approval requests are published.
func (n Names) ApprovalsSubject(session string) string {
	return ApprovalsSubject(n.t.Prefix, session)
}

// ApprovalRequestsSubject returns jw.approvals.<session>.request, where
// tool workers publish the approval requests of the session's calls.
func (n Names) ApprovalRequestsSubject(session string) string {
	return n.ApprovalsSubject(session) + ".request"
}

// ApprovalConsumerName is the durable consumer on JW_APPROVALS that the
// tool workers share (<PREFIX>_toolworker_approvals): it delivers every
// answer to a worker that owns, or can take, the answer's session.
func (n Names) ApprovalConsumerName() string { return n.StreamName("toolworker_approvals") }
