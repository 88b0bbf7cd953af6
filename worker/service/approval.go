package service

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// ApprovalReceipt is what SubmitApproval reports about one signed answer
// to a call waiting for approval.
type ApprovalReceipt struct {
	// Approval is the answer as published.
	Approval schema.Approval `json:"approval"`
	// Subject is where it was published: <prefix>.approvals.<session>.
	Subject string `json:"subject"`
}

// SubmitApproval checks the signed answer a (schema.Approval.Validate)
// and publishes it on <prefix>.approvals.<session> with the client's
// connection (an approver's: the reviewer role may publish there), with
// stream.PublishApproval, waiting for JetStream's acknowledgement, bounded
// by the client's timeout. A field that is not acceptable is returned as
// its *schema.Error (field_too_long, …) and nothing is published; a failed
// publish is an uncoded error that says to check the topology.
//
// Publishing is all it does: the tool worker that owns (or takes) the
// session judges the answer against its trusted approvers, and its
// outcome shows on the session log (approval.granted, or the call's
// result rejected at stage approval). An answer it refuses changes
// nothing and stays in JW_APPROVALS (the audit trail). SubmitApproval
// neither signs nor checks the signer: sign a with recovery.SignApproval
// first. `jingwei approve` / `jingwei deny` and the review console both
// publish answers through it.
func (c *Client) SubmitApproval(ctx context.Context, a schema.Approval) (ApprovalReceipt, error) {
	rc := ApprovalReceipt{Approval: a, Subject: stream.ApprovalsSubject(c.prefix, a.Session)}
	if err := a.Validate(); err != nil {
		return rc, err
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		return rc, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.Guard(ctx, []string{rc.Subject}, func(ctx context.Context) error { return stream.PublishApproval(ctx, js, c.prefix, a) }); err != nil {
		if schema.CodeOf(err) == schema.CodePermissionDenied {
			return rc, err
		}
		return rc, fmt.Errorf("%w (does the topology exist? start 'jingwei serve')", err)
	}
	return rc, nil
}
