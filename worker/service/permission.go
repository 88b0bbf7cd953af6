package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/schema"
)

// A NATS server answers a publish or a subscription the connection's
// credentials do not allow with an asynchronous -ERR ("Permissions
// Violation for Publish to \"jw.api.prepare\""), never on the request
// itself: the request then waits for an answer that cannot come. The
// permission watch of a connection hands every such violation to the
// operations waiting on the subjects it names, so that they fail at once
// with permission_denied.

// permWatch fans a connection's permission violations out to the
// operations waiting on it.
type permWatch struct {
	mu      sync.Mutex
	waiters map[*permWaiter]struct{}
}

// permWaiter is one operation waiting on subjects: its context is
// cancelled with the violation as the cause. With any set it waits on
// every violation of the connection (a service's request, whose handler's
// subjects the service does not know).
type permWaiter struct {
	subjects []string
	// prefixes: a violation of a subject starting with one of these.
	prefixes []string
	any      bool
	cancel   context.CancelCauseFunc
}

// watchPermissions installs a permission watch in front of nc's own
// asynchronous error handler, which still sees every error.
func watchPermissions(nc *nats.Conn) *permWatch {
	w := &permWatch{waiters: map[*permWaiter]struct{}{}}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			w.mu.Lock()
			for pw := range w.waiters {
				if (pw.any && !isAnswer(err)) || violates(err, pw.subjects) || violatesPrefix(err, pw.prefixes) {
					pw.cancel(err)
				}
			}
			w.mu.Unlock()
		}
		if prev != nil {
			prev(c, s, err)
		}
	})
	return w
}

// violates reports whether the violation err is about one of subjects, or
// about a subscription to an inbox (the reply subject of a request).
func violates(err error, subjects []string) bool {
	s := err.Error()
	for _, subj := range subjects {
		if strings.Contains(s, `"`+subj+`"`) {
			return true
		}
	}
	return strings.Contains(strings.ToLower(s), "subscription") && strings.Contains(s, "_INBOX")
}

// violatesPrefix reports a violation of a subject starting with one of
// prefixes (the server quotes the subject).
func violatesPrefix(err error, prefixes []string) bool {
	s := err.Error()
	for _, p := range prefixes {
		if strings.Contains(s, `to "`+p) {
			return true
		}
	}
	return false
}

// isAnswer reports a violation of a publish on a reply subject (an inbox,
// or the _R_ reply subject of an account's import): the answer to some
// request the server did not let through (one too many, or after the
// response expiry), not an operation of a request being answered.
func isAnswer(err error) bool {
	s := err.Error()
	return strings.Contains(s, `Publish to "_INBOX.`) || strings.Contains(s, `Publish to "_R_.`)
}

// Guard runs op with a context that ends, and returns permission_denied,
// as soon as the server reports a permission violation of c's connection
// about one of subjects (or the reply inbox); otherwise it returns op's
// error. The *schema.Error names the subject (in the server's words) and
// the role the connection needs (ClientConfig.Role). The Client's own
// requests and publishes run through it; a caller publishing on the
// Client's connection itself (a task stop) may too.
func (c *Client) Guard(ctx context.Context, subjects []string, op func(context.Context) error) error {
	return c.perm.guard(ctx, &permWaiter{subjects: subjects}, func(err error) error { return c.permissionDenied(err) }, op)
}

// guard runs op with pw registered: a violation pw waits on cancels op's
// context, and guard returns denied(violation) instead of op's error.
func (w *permWatch) guard(ctx context.Context, pw *permWaiter, denied func(error) error, op func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pw.cancel = cancel
	w.mu.Lock()
	w.waiters[pw] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiters, pw)
		w.mu.Unlock()
	}()
	err := op(ctx)
	if cause := context.Cause(ctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return denied(cause)
	}
	return err
}

// permissionDenied returns the permission_denied error of the violation
// err.
func (c *Client) permissionDenied(err error) *schema.Error {
	need := "the role that may"
	if c.role != "" {
		need = "role " + c.role
	}
	return &schema.Error{Code: schema.CodePermissionDenied, Err: err,
		Message: fmt.Sprintf("%s: these credentials lack the permission; this needs %s (docs/protocol.md §4)", violation(err), need)}
}

// serviceDenied returns the permission_denied answer of a request whose
// handler ran into the violation err on the service's own connection;
// role ("" unknown) is the role the service's handlers need
// (Config.Role). The service's credentials, not the requester's, lack the
// grant: no retry of the request helps until the service connects with
// that role.
func serviceDenied(err error, role string) *schema.Error {
	need := "the role docs/protocol.md §4 gives it"
	if role != "" {
		need = "role " + role + " (docs/protocol.md §4)"
	}
	return &schema.Error{Code: schema.CodePermissionDenied, Err: err,
		Message: fmt.Sprintf("%s: the service's own credentials lack the permission this request needs; the service must connect with %s", violation(err), need)}
}

// violation is the server's words for the violation err ("Permissions
// Violation for Publish to \"jw.plans.s-1\"").
func violation(err error) string {
	return strings.TrimPrefix(err.Error(), nats.ErrPermissionViolation.Error()+": ")
}
