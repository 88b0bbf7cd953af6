package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/approval"
	"github.com/jingwei/jingwei/console"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

func init() {
	register(command{name: "console", summary: "serve the review console: calls awaiting review, verdicts, retry plans in a browser", run: runConsole})
}

const consoleHelp = `  jingwei console [--listen 127.0.0.1:8470] [--auth DIR] [--trust-reviewers FILE] [--token-file FILE]

Serves the review console, a small web server for reviewers and approvers:
the calls waiting for approval and the calls awaiting review, live (no
reload), each with its tool, arguments, contract, attempts, the chain of its
events from the session log, the assessment and why, and the reviews and
approvals on record, each with the name of the person whose key signed it;
a form to sign a verdict (not_executed, completed, uncertain) and one to
approve or deny a waiting call; a button that asks for the retry plan
('jingwei retry') and shows the plan or the refusal; sessions, their logs,
the retry plans and the stopped tasks.

The console holds NO signing key. Each person signs with their own key, in
their browser: "Your key" on every page makes a key there (WebCrypto
Ed25519, kept in the browser, never exportable) or imports the seed
'jingwei keys new' wrote (SU…), so the same key signs in the browser and
with 'jingwei review'/'jingwei approve --key FILE'. The browser sends the
signed review or answer; the console checks it (well formed, about this
call, its signature verifies, its signer is a trusted key when the console
knows them) and relays it on the reviewer role's connection, then shows
whether the recovery worker accepted it (or what the tool worker made of
an answer), or the refusal and its code. A form that is not signed is
refused.

Trust files name each key: one line "<public key> <name>" per person
(the older forms, one key per line or several on a line, still read).
--trust-reviewers FILE (env JINGWEI_TRUST_REVIEWERS) is the file the
recovery worker trusts ('recover --trust-reviewers', 'serve
--trust-reviewers'): a review signed by another key is refused before
anything is published, and every review shows its signer's name.
--trust-approvers (default <auth dir>/approvers when it exists) is the
same for the approvers the tool workers trust. Without a file the console
relays every well-signed decision and shows the recovery worker's (or the
log's) judgement. The name in the trust file is the one shown as "signed
by"; the operator or approver a person writes in the form is kept in the
signed record and shown beside it, as written.

Login: the console prints a login URL with a secret token at start (as
local notebook servers do): open it once in the browser, which then holds
a cookie. Every request without it is answered 401, and a POST must also
come from the console's page (same origin by Sec-Fetch-Site or Origin: a
request carrying neither is refused) with the CSRF token bound to the
login. --token-file FILE reads the token (at least 16 bytes) from FILE
instead of making one, so the URL stays the same across restarts.

A call whose body may still be running (evidence no_result, timeout or
cancelled: WRITER "may run" in 'jingwei status') says so on its page, with
what to do before signing not_executed: fence its store, then check, then
sign.

Roles: the console connects twice, as the reviewer role (it relays the
signed reviews and answers and asks jw.api.status and jw.api.inspect) and
as the host role (it reads the session logs and jw_plans and asks
jw.api.prepare), with <auth dir>/reviewer.nk and <auth dir>/host.nk
('jingwei serve' keeps them in DATA/auth), or the files
--reviewer-nkey/--reviewer-creds and --host-nkey/--host-creds name
(--creds or --nkey, as other commands spell them, for a role without its
own: one user allowed what both roles may). It can
do nothing those roles cannot, and a review counts only when signed by a
trusted person's key, which the console never holds.

The console listens on loopback only unless --allow-remote is given (then
serve it over TLS, behind a proxy: the login token travels in the URL and
the cookie). Pages carry a strict Content-Security-Policy; a request naming
a Host the console does not answer to is refused (421).

Exit status:
  0  stopped by an interrupt
  1  unexpected failure: the server is unreachable, the address is taken
  2  usage: a bad flag, an unreadable trust or token file, --key or
     --approver-key (the console holds no key)`

// consoleConn is the connection flags of one of the console's roles.
type consoleConn struct {
	role        access.Role
	creds, nkey string
}

func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("console", "Serve the review console.", consoleHelp, stderr)
	var n natsFlags
	registerConsoleNATS(fs, &n)
	var log logFlags
	log.register(fs)
	reviewer := consoleConn{role: access.RoleReviewer}
	host := consoleConn{role: access.RoleHost}
	fs.StringVar(&reviewer.creds, "reviewer-creds", "", "credentials file of the reviewer role (default: <auth dir>/reviewer.nk)")
	fs.StringVar(&reviewer.nkey, "reviewer-nkey", "", "nkey seed file of the reviewer role (default: <auth dir>/reviewer.nk)")
	fs.StringVar(&host.creds, "host-creds", "", "credentials file of the host role (default: <auth dir>/host.nk)")
	fs.StringVar(&host.nkey, "host-nkey", "", "nkey seed file of the host role (default: <auth dir>/host.nk)")
	listen := fs.String("listen", console.DefaultListen, "address the console listens on (loopback unless --allow-remote)")
	allowRemote := fs.Bool("allow-remote", false, "allow a non-loopback --listen address (serve it behind TLS: the login token is in the URL)")
	traceURL := fs.String("trace-url", envOr("JINGWEI_TRACE_URL", ""), "trace UI address of one trace with {trace_id}, e.g. http://jaeger:16686/trace/{trace_id}: a call's page links to its trace (env JINGWEI_TRACE_URL)")
	hostNames := fs.String("host-names", "", "comma-separated Host names the console answers to (default: loopback names; with --allow-remote: any)")
	keyFile := fs.String("key", "", "no longer accepted: the console holds no signing key (people sign in their browsers)")
	approverFile := fs.String("approver-key", "", "no longer accepted: the console holds no signing key (people sign in their browsers)")
	trustReviewers := fs.String("trust-reviewers", envOr("JINGWEI_TRUST_REVIEWERS", ""), "file of the reviewer keys the recovery worker trusts, with their names ('<key> <name>' lines): reviews by other keys are refused before publishing (env JINGWEI_TRUST_REVIEWERS)")
	trustApprovers := fs.String("trust-approvers", envOr("JINGWEI_TRUST_APPROVERS", ""), "file of the approver keys the tool workers trust, with their names (default <auth dir>/approvers when it exists; env JINGWEI_TRUST_APPROVERS)")
	tokenFile := fs.String("token-file", "", "file holding the login token (at least 16 bytes; default: a new random token, printed in the login URL)")
	approvalWait := fs.Duration("approval-wait", console.DefaultApprovalWait, "how long to wait for the session log to show what the tool worker made of an answer")
	timeout := fs.Duration("timeout", console.DefaultTimeout, "how long to wait for the server and each answer (connecting included)")
	var mf metricsFlag
	mf.register(fs)
	poll := fs.Duration("poll", console.DefaultPollInterval, "how often the console looks for changes to push to the open pages")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	lg, err := log.logger(stderr)
	if err != nil {
		return usageError(stderr, "console", "%v", err)
	}
	switch {
	case *keyFile != "" || *approverFile != "":
		return usageError(stderr, "console", "--key and --approver-key are gone: the console holds no signing key. Each person signs with their own key in the browser (import the seed there, under \"Your key\") or with jingwei review/approve --key FILE")
	case *timeout <= 0 || *poll <= 0 || *approvalWait <= 0:
		return usageError(stderr, "console", "--timeout, --poll and --approval-wait must be positive")
	}
	lhost, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return usageError(stderr, "console", "--listen %q: want host:port", *listen)
	}
	var allowed []string
	for _, h := range strings.Split(*hostNames, ",") {
		if h = strings.TrimSpace(h); h != "" {
			allowed = append(allowed, h)
		}
	}
	if !console.IsLoopback(lhost) {
		if !*allowRemote {
			return usageError(stderr, "console", "--listen %s is not a loopback address; give --allow-remote to do it anyway (behind TLS: the login token travels in the URL and the cookie)", *listen)
		}
		fmt.Fprintf(stderr, "jingwei console: WARNING: listening on %s, beyond this machine: whoever has the login URL can prepare plans and read every session; serve it behind TLS\n", *listen)
		if len(allowed) == 0 {
			allowed = []string{"*"}
		}
	}
	reviewers, reviewerNames, err := approval.ReadNamed(*trustReviewers, "")
	if err != nil {
		return usageError(stderr, "console", "--trust-reviewers: %v", err)
	}
	approvers, approverNames, err := approval.ReadNamed(*trustApprovers, n.authDir())
	if err != nil {
		return usageError(stderr, "console", "--trust-approvers: %v", err)
	}
	token := ""
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return usageError(stderr, "console", "--token-file: %v", err)
		}
		if token = strings.TrimSpace(string(b)); len(token) < console.MinTokenBytes {
			return usageError(stderr, "console", "--token-file %s: the token must be at least %d bytes", *tokenFile, console.MinTokenBytes)
		}
	}

	ms, err := mf.listen()
	if err != nil {
		return consoleFailure(stderr, err)
	}
	defer ms.close()
	n.connectTimeout = *timeout
	rc, err := n.connectConsole(ctx, reviewer, lg)
	if err != nil {
		return consoleFailure(stderr, err)
	}
	defer rc.Close()
	hc, err := n.connectConsole(ctx, host, lg)
	if err != nil {
		return consoleFailure(stderr, err)
	}
	defer hc.Close()

	c, err := console.New(console.Config{
		Reviewer: rc, Host: hc, Token: token,
		TrustedReviewers: reviewers, ReviewerNames: reviewerNames,
		TrustedApprovers: approvers, ApproverNames: approverNames, ApprovalWait: *approvalWait,
		Prefix: n.prefix, Timeout: *timeout,
		PollInterval: *poll, AllowedHosts: allowed, Logger: lg, Metrics: ms.console(), TraceURL: *traceURL,
	})
	if err != nil {
		return usageError(stderr, "console", "%v", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return consoleFailure(stderr, fmt.Errorf("listen on %s: %w (is another console running? pick another --listen)", *listen, err))
	}
	ms.serve(ctx, "console", stderr)
	fmt.Fprintf(stdout, "jingwei console on http://%s/ (it holds no signing key: people sign in their browsers; Ctrl-C to stop)\n", ln.Addr())
	fmt.Fprintf(stdout, "log in: http://%s%s\n", ln.Addr(), c.LoginPath())
	if err := c.Serve(ctx, ln); err != nil {
		return consoleFailure(stderr, err)
	}
	return exitOK
}

// registerConsoleNATS registers the connection flags every client has.
// --creds and --nkey, as every other command spells them, are the
// credentials of a role without its own --<role>-creds/--<role>-nkey.
func registerConsoleNATS(fs *flag.FlagSet, n *natsFlags) {
	fs.StringVar(&n.creds, "creds", envOr("NATS_CREDS", ""), "NATS credentials file for both roles (a user that may do what the reviewer and the host may), used for a role without --<role>-creds/--<role>-nkey (env NATS_CREDS)")
	fs.StringVar(&n.nkey, "nkey", envOr("NATS_NKEY", ""), "NATS nkey seed file for both roles, used for a role without --<role>-creds/--<role>-nkey (env NATS_NKEY)")
	fs.StringVar(&n.server, "server", envOr("NATS_URL", natsnode.DefaultURL), "NATS server URL(s), comma separated (env NATS_URL)")
	fs.StringVar(&n.tlsca, "tlsca", envOr("NATS_CA", ""), "PEM file of CAs to verify the server's TLS certificate (env NATS_CA)")
	fs.StringVar(&n.prefix, "prefix", envOr("JINGWEI_PREFIX", "jw"), "subject prefix of the jingwei topology (env JINGWEI_PREFIX)")
	fs.StringVar(&n.auth, "auth", envOr("JINGWEI_AUTH", ""), "directory of role credentials (reviewer.nk, host.nk), used for a role without --<role>-creds/--<role>-nkey; default ./.jingwei/auth if it exists (env JINGWEI_AUTH)")
}

// connectConsole connects as one of the console's roles: its --<role>-creds
// or --<role>-nkey, else <auth dir>/<role>.nk, else without credentials.
func (n *natsFlags) connectConsole(ctx context.Context, cc consoleConn, log zerolog.Logger) (*nats.Conn, error) {
	nkey := cc.nkey
	if cc.creds == "" && nkey == "" {
		cc.creds, nkey = n.creds, n.nkey
	}
	if cc.creds == "" && nkey == "" {
		if dir := n.authDir(); dir != "" {
			if _, err := access.KeyDir(dir).KeyPair(cc.role); err != nil {
				return nil, fmt.Errorf("role %s: %w", cc.role, err)
			}
			nkey = access.KeyDir(dir).SeedFile(cc.role)
		}
	}
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{
		URL: n.server, Creds: cc.creds, NKeySeedFile: nkey, TLSCA: n.tlsca,
		Name: "jingwei console (" + string(cc.role) + ")", Logger: log, ConnectTimeout: n.connectTimeout,
	})
	if err != nil {
		if isAuthError(err) {
			if nkey == "" && cc.creds == "" {
				return nil, fmt.Errorf("role %s: %w (the server requires credentials: give --auth DIR holding %s.nk, --%s-nkey FILE or --%s-creds FILE)", cc.role, err, cc.role, cc.role, cc.role)
			}
			return nil, fmt.Errorf("role %s: %w", cc.role, err)
		}
		return nil, fmt.Errorf("role %s: %w (is a server running? start one with 'jingwei serve', or point --server/$NATS_URL at yours)", cc.role, err)
	}
	return nc, nil
}

func consoleFailure(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "jingwei console: %v\n", err)
	if errors.Is(err, access.ErrBadKey) {
		return exitUsage
	}
	return exitFailure
}
