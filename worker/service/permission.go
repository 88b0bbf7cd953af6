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
// cancelled with the violation as the cause.
type permWaiter struct {
	subjects []string
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
				if violates(err, pw.subjects) {
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

// Guard runs op with a context that ends, and returns permission_denied,
// as soon as the server reports a permission violation of c's connection
// about one of subjects (or the reply inbox); otherwise it returns op's
// error. The *schema.Error names the subject (in the server's words) and
// the role the connection needs (ClientConfig.Role). The Client's own
// requests and publishes run through it; a caller publishing on the
// Client's connection itself (a task stop) may too.
func (c *Client) Guard(ctx context.Context, subjects []string, op func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pw := &permWaiter{subjects: subjects, cancel: cancel}
	c.perm.mu.Lock()
	c.perm.waiters[pw] = struct{}{}
	c.perm.mu.Unlock()
	defer func() {
		c.perm.mu.Lock()
		delete(c.perm.waiters, pw)
		c.perm.mu.Unlock()
	}()
	err := op(ctx)
	if cause := context.Cause(ctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return c.permissionDenied(cause)
	}
	return err
}

// permissionDenied returns the permission_denied error of the violation
// err.
func (c *Client) permissionDenied(err error) *schema.Error {
	msg := strings.TrimPrefix(err.Error(), nats.ErrPermissionViolation.Error()+": ")
	need := "the role that may"
	if c.role != "" {
		need = "role " + c.role
	}
	return &schema.Error{Code: schema.CodePermissionDenied, Err: err,
		Message: fmt.Sprintf("%s: these credentials lack the permission; this needs %s (docs/protocol.md §4)", msg, need)}
}
