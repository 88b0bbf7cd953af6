package console

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// Defaults of Config.
const (
	// DefaultListen is the console's default address (`jingwei console
	// --listen`): loopback only.
	DefaultListen = "127.0.0.1:8470"
	// DefaultTimeout bounds one request of the console to NATS (a service
	// request, a stream read).
	DefaultTimeout = 10 * time.Second
	// DefaultPollInterval is how often the console asks for the recovery
	// worker's status to push changes to the open pages.
	DefaultPollInterval = time.Second
	// MaxFormBytes bounds the body of a POST: a signed decision's operator
	// and evidence are at most schema.MaxFieldBytes each.
	MaxFormBytes = 16 << 10
	// MinTokenBytes is the shortest Config.Token the console accepts.
	MinTokenBytes = 16
	// MaxDetailed is how many calls awaiting review the front page shows
	// with their details; the rest are listed in a table.
	MaxDetailed = 20
)

// Config configures a Console. Reviewer and Host are required; every
// other field has a default. The console holds no signing key: reviews and
// approvals are signed by each person in their browser with their own key
// (or with `jingwei review`/`approve --key`), and the console only checks
// and relays them.
type Config struct {
	// Reviewer is a connection as the reviewer role: the console relays
	// the signed reviews and answers people make in their browsers on
	// <prefix>.reviews.<session> and <prefix>.approvals.<session>, and
	// asks jw.api.status and jw.api.inspect on it. The role may publish
	// reviews but holds no trusted key: only a person's signature makes a
	// review count. Required. The caller keeps it and closes it after the
	// console stopped.
	Reviewer *nats.Conn
	// Host is a connection as the host role: the console reads the session
	// logs, the streams' metadata and jw_plans, and asks jw.api.prepare on
	// it. Required; it may be the same connection as Reviewer only on a
	// server without authorization. The caller closes it.
	Host *nats.Conn
	// Token is the login secret: a browser opens <console>/login?token=
	// Token once and gets a cookie; every other request without that
	// cookie is answered 401. At least MinTokenBytes long. Empty means New
	// makes a random one (Console.Token returns it, `jingwei console`
	// prints the login URL).
	Token string
	// TrustedReviewers are the reviewer keys the recovery worker trusts,
	// when the console knows them (`jingwei console --trust-reviewers`,
	// the file `recover --trust-reviewers` reads): a review signed by
	// another key is refused before anything is published. Nil means
	// unknown: the console relays every well-signed review and reports
	// how the recovery worker judges it.
	TrustedReviewers recovery.TrustedKeys
	// ReviewerNames are the names the trusted reviewers file gives its
	// keys: every review on a page shows its signer's name. Nil names no
	// one (the keys are shown).
	ReviewerNames recovery.KeyNames
	// TrustedApprovers are the approver keys the tool workers trust, when
	// the console knows them (`jingwei console` reads <auth dir>/approvers
	// or --trust-approvers): an answer signed by another key is refused
	// before anything is published. Nil means unknown: the console judges
	// an answer by what the session log shows within ApprovalWait only.
	TrustedApprovers recovery.TrustedKeys
	// ApproverNames are the names the approvers file gives its keys. Nil
	// names no one.
	ApproverNames recovery.KeyNames
	// ApprovalWait is how long the console waits after publishing an
	// answer for the session log to show its outcome (approval.granted,
	// or the call rejected at stage approval). Defaults to
	// DefaultApprovalWait.
	ApprovalWait time.Duration
	// Prefix is the topology's subject prefix. Defaults to
	// stream.DefaultPrefix ("jw").
	Prefix string
	// Timeout bounds each request to NATS. Defaults to DefaultTimeout.
	Timeout time.Duration
	// PollInterval is how often the console looks for changes to push to
	// the open pages. Defaults to DefaultPollInterval.
	PollInterval time.Duration
	// AllowedHosts are the names (host or host:port) the console answers
	// to in a request's Host header; a request naming another host is
	// refused (421), which keeps a DNS-rebinding page from reaching a
	// loopback console. Nil or empty means the loopback names only:
	// localhost, 127.0.0.0/8 and ::1, any port. "*" answers to every host
	// (a console on a non-loopback address whose names are not known).
	AllowedHosts []string
	// TraceURL is a trace UI's address of one trace, with {trace_id} where
	// the trace id goes (e.g. http://jaeger:16686/trace/{trace_id}): a
	// call's page links to the trace its tool.call message carries. Empty
	// links nothing.
	TraceURL string
	// Logger receives the console's log (failed polls, published
	// decisions). The zero value logs nothing.
	Logger zerolog.Logger
	// Metrics counts the reviews and answers the console relays and the
	// plans it asks for (metrics.NewConsole). Nil counts nothing.
	Metrics *metrics.Console
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = stream.DefaultPrefix
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ApprovalWait <= 0 {
		c.ApprovalWait = DefaultApprovalWait
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Reviewer == nil:
		return fmt.Errorf("%w: Reviewer (a connection as the reviewer role) is required", ErrInvalidConfig)
	case c.Host == nil:
		return fmt.Errorf("%w: Host (a connection as the host role) is required", ErrInvalidConfig)
	case c.Token != "" && len(c.Token) < MinTokenBytes:
		return fmt.Errorf("%w: Token must be at least %d bytes (or empty: the console makes one)", ErrInvalidConfig, MinTokenBytes)
	case !schema.ValidSession(c.Prefix):
		return fmt.Errorf("%w: Prefix %q: want [A-Za-z0-9_-]+", ErrInvalidConfig, c.Prefix)
	}
	for _, h := range c.AllowedHosts {
		if strings.TrimSpace(h) == "" {
			return fmt.Errorf("%w: AllowedHosts holds an empty name", ErrInvalidConfig)
		}
	}
	return nil
}

// hostAllowed reports whether a request's Host header names a host the
// console answers to.
func (c Config) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if len(c.AllowedHosts) == 0 {
		return IsLoopback(host)
	}
	for _, a := range c.AllowedHosts {
		if a == "*" || strings.EqualFold(a, hostport) || strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

// IsLoopback reports whether host (a name or an IP address, without a
// port) is a loopback host: "localhost" or an address in 127.0.0.0/8 or
// ::1. An empty host (":8470", every interface) is not.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
