package service

import (
	"encoding/json"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// Target is the request body of jw.api.inspect and jw.api.prepare
// (target.schema.json).
type Target struct {
	Session string `json:"session"`
	CallID  string `json:"call_id"`
}

// StatusRequest is the request body of jw.api.status
// (statusrequest.schema.json); an empty body asks about every session.
type StatusRequest struct {
	Session string `json:"session,omitempty"`
	// CallID, with Session, asks for the call's reviews too (Status.Reviews):
	// how the recovery worker judges each review on jw.reviews.<session>
	// for it.
	CallID string `json:"call_id,omitempty"`
}

// Status is the answer of jw.api.status (status.schema.json).
type Status struct {
	// Session is the session asked about, "" for all.
	Session string `json:"session,omitempty"`
	// OpenCalls are the calls without a result yet, as the recovery
	// worker's classifier tracks them.
	OpenCalls []OpenCall `json:"open_calls"`
	// AwaitingReview are the calls whose latest assessment the recovery
	// worker published is needs_review and for which no plan was issued
	// since (at most the 10,000 most recent).
	AwaitingReview []schema.Assessment `json:"awaiting_review"`
	// Plans counts the plans in jw_plans by state.
	Plans PlanCounts `json:"plans"`
	// Stats are the classifier's counters.
	Stats Stats `json:"stats"`
	// Reviews are the reviews of one call (only when the request named a
	// call), in stream order, each as prepare would judge it.
	Reviews []ReviewCheck `json:"reviews,omitempty"`
	// AwaitingApproval are the calls waiting for approval (their
	// approval.requested has no answer on the log yet), in log order; for
	// one session read from its log, for all as the classifier tracks
	// them.
	AwaitingApproval []WaitingApproval `json:"awaiting_approval,omitempty"`
	// StoppedTasks are the stopped tasks (task.stopped on the log).
	StoppedTasks []StoppedTask `json:"stopped_tasks,omitempty"`
}

// WaitingApproval is a call waiting for approval, as jw.api.status shows
// it.
type WaitingApproval struct {
	Session  string    `json:"session"`
	CallID   string    `json:"call_id"`
	Tool     string    `json:"tool"`
	Task     string    `json:"task"`
	Deadline time.Time `json:"deadline"`
	// Seq is the stream sequence of the approval.requested.
	Seq uint64 `json:"seq"`
}

// StoppedTask is a stopped task, as jw.api.status shows it.
type StoppedTask struct {
	Session string    `json:"session"`
	Task    string    `json:"task"`
	By      string    `json:"by"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
	// Seq is the stream sequence of the task.stopped.
	Seq uint64 `json:"seq"`
}

// OpenCall describes a call that has no result yet, as jw.api.status
// shows it.
type OpenCall struct {
	Session  string          `json:"session"`
	CallID   string          `json:"call_id"`
	Tool     string          `json:"tool"`
	Task     string          `json:"task,omitempty"`
	Key      string          `json:"key,omitempty"`
	Contract effect.Contract `json:"contract"`
	Epoch    uint64          `json:"epoch"`
	Seq      uint64          `json:"seq"`
	Started  bool            `json:"started"`
	// At is the tool.call's timestamp (its writer's clock): how long the
	// call has been open.
	At time.Time `json:"at,omitzero"`
}

// PlanCounts counts plans by state.
type PlanCounts struct {
	Issued   int `json:"issued"`
	Consumed int `json:"consumed"`
	// IssuedIDs lists the plans still issued (for one session only).
	IssuedIDs []string `json:"issued_ids,omitempty"`
}

// Stats are the recovery worker's classifier counters.
type Stats struct {
	// EventsSeen is how many session events the classifier has read since
	// the process started.
	EventsSeen uint64 `json:"events_seen"`
	// OpenCalls is how many calls the classifier tracks as open: its memory
	// is proportional to this, not to EventsSeen.
	OpenCalls int `json:"open_calls"`
}

// ReviewCheck is one review of a call on jw.reviews.<session>, judged as
// prepare judges it: Accepted when it is well formed, for its subject's
// session, signed by a trusted reviewer key and not in conflict with a
// completed review of the call before it (completed is final: a later
// review with another verdict is rejected with review_conflict); otherwise
// Code and Reason say why it is ignored. Decides marks the one review that
// prepare applies: the latest accepted one.
type ReviewCheck struct {
	// Seq is the review's sequence in JW_REVIEWS.
	Seq      uint64        `json:"seq"`
	Review   schema.Review `json:"review"`
	Accepted bool          `json:"accepted"`
	Decides  bool          `json:"decides,omitempty"`
	Code     string        `json:"code,omitempty"`
	Reason   string        `json:"reason,omitempty"`

	// Source is where the review came from: "person" (signed with a
	// reviewer key) or "probe" (an automated review, Review.Probe set,
	// signed with a prober key).
	Source string `json:"source,omitempty"`
}

// DefaultHistoryEvents is how many events a jw.api.history page holds at
// most when the request sets no max_events.
const DefaultHistoryEvents = 1000

// MaxHistoryEvents bounds HistoryRequest.MaxEvents.
const MaxHistoryEvents = 10000

// HistoryRequest is the request body of jw.api.history
// (historyrequest.schema.json): one page of a session's log.
type HistoryRequest struct {
	// V is the schema version: schema.Version (1).
	V int `json:"v"`
	// Session is the session whose log is read (a tenant's agent: one of
	// the tenant's own).
	Session string `json:"session"`
	// FromSeq is the stream sequence to read from: the page's first event
	// is the session's first at or after it (0 and 1: from the start). A
	// reader passes the previous page's NextSeq.
	FromSeq uint64 `json:"from_seq,omitempty"`
	// MaxEvents bounds the page's events: 1 to MaxHistoryEvents, 0 for
	// DefaultHistoryEvents. The page is also bounded in bytes, below the
	// server's max_payload.
	MaxEvents int `json:"max_events,omitempty"`
}

// HistoryPage is the answer of jw.api.history (historypage.schema.json).
// The page is done with the log as the leader held it when NextSeq > End;
// otherwise ask again from NextSeq.
type HistoryPage struct {
	// Session is the session read.
	Session string `json:"session"`
	// Events are the session's events from FromSeq on, in stream order,
	// each as stored on the log (never re-encoded from a decoded event).
	Events []StoredEvent `json:"events"`
	// NextSeq is the sequence to ask for next: one past the last event of
	// the page (FromSeq, at least 1, when the page is empty).
	NextSeq uint64 `json:"next_seq"`
	// End is the sequence of the session's last event as the stream
	// leader held it when the page was read (0: no events).
	End uint64 `json:"end"`
}

// StoredEvent is one event of a HistoryPage: its stream sequence and the
// event as stored on jw.events.<session> (an event.schema.json object
// without seq). It decodes with schema.DecodeEvent.
type StoredEvent struct {
	Seq   uint64          `json:"seq"`
	Event json.RawMessage `json:"event"`
}
