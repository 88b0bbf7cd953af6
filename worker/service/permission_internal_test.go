package service

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestIsAnswer: a refused publish on a reply subject is some request's
// answer (one too many, or after the response expiry) and must not end the
// requests a service is answering; a refused publish anywhere else, or a
// refused subscription, is an operation's and does.
func TestIsAnswer(t *testing.T) {
	for text, want := range map[string]bool{
		`Permissions Violation for Publish to "_INBOX.abc.1"`:   true,
		`Permissions Violation for Publish to "_R_.xyz.Q2"`:     true,
		`Permissions Violation for Publish to "jw.plans.s-1"`:   false,
		`Permissions Violation for Subscription to "_INBOX.>"`:  false,
		`Permissions Violation for Publish to "tools.ledger.x"`: false,
	} {
		err := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, text)
		if got := isAnswer(err); got != want {
			t.Errorf("%s: %v, want %v", text, got, want)
		}
	}
}
