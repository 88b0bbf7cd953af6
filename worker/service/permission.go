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
	waiters map[chan error]struct{}
}

// watchPermissions installs a permission watch in front of nc's own
// asynchronous error handler, which still sees every error.
func watchPermissions(nc *nats.Conn) *permWatch {
	w := &permWatch{waiters: map[chan error]struct{}{}}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			w.mu.Lock()
			for ch := range w.waiters {
				select {
				case ch <- err:
				default:
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

func (w *permWatch) add() chan error {
	ch := make(chan error, 4)
	w.mu.Lock()
	w.waiters[ch] = struct{}{}
	w.mu.Unlock()
	return ch
}

func (w *permWatch) remove(ch chan error) {
	w.mu.Lock()
	delete(w.waiters, ch)
	w.mu.Unlock()
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
	ch := c.perm.add()
	defer c.perm.remove(ch)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()
	for {
		select {
		case err := <-done:
			return err
		case perr := <-ch:
			if !violates(perr, subjects) {
				continue
			}
			cancel()
			<-done
			return c.permissionDenied(perr)
		}
	}
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
