package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/console"
	"github.com/jingwei/jingwei/stream"
)

func init() {
	register(command{name: "console", summary: "serve the review console: calls awaiting review, verdicts, retry plans in a browser", run: runConsole})
}

const consoleHelp = `  jingwei console --key FILE [--listen 127.0.0.1:8470] [--auth DIR]

Serves the review console, a small web server for reviewers: the calls
awaiting review, live (no reload), each with its tool, arguments, contract,
attempts, the chain of its events from the session log, the assessment and
why, and the reviews on record (accepted or ignored, and why); a form that
signs a verdict (not_executed, completed, uncertain) with --key and publishes
it as 'jingwei review' does; a button that asks for the retry plan
('jingwei retry') and shows the plan or the refusal; sessions, their logs and
the retry plans.

It prints its URL and serves until interrupted (Ctrl-C). Open the URL in a
browser on the same machine.

Roles: the console connects twice, as the reviewer role (it publishes the
signed reviews and asks jw.api.status and jw.api.inspect) and as the host
role (it reads the session logs and jw_plans and asks jw.api.prepare), with
<auth dir>/reviewer.nk and <auth dir>/host.nk ('jingwei serve' keeps them in
DATA/auth), or the files --reviewer-nkey/--reviewer-creds and
--host-nkey/--host-creds name. It can do nothing those roles cannot.

--key is the reviewer signing key (an nkey user seed, as 'jingwei review
--key' reads it; 'jingwei serve' makes DATA/reviewer.nk and trusts it). The
recovery worker ignores reviews by keys it does not trust; the console
shows that refusal and its code.

The console listens on loopback only unless --allow-remote is given: it has
no login of its own, so whoever reaches it can sign with its key. Pages carry
a strict Content-Security-Policy; a POST must come from the console's own
page (same origin, a CSRF token bound to the browser's cookie); a request
naming a Host the console does not answer to is refused (421).

Exit status:
  0  stopped by an interrupt
  1  unexpected failure: the server is unreachable, the address is taken
  2  usage: a missing or bad flag, a key file that is not an nkey user seed`

// consoleConn is the connection flags of one of the console's roles.
type consoleConn struct {
	role        stream.Role
	creds, nkey string
}

func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("console", "Serve the review console.", consoleHelp, stderr)
	var n natsFlags
	registerConsoleNATS(fs, &n)
	var log logFlags
	log.register(fs)
	reviewer := consoleConn{role: stream.RoleReviewer}
	host := consoleConn{role: stream.RoleHost}
	fs.StringVar(&reviewer.creds, "reviewer-creds", "", "credentials file of the reviewer role (default: <auth dir>/reviewer.nk)")
	fs.StringVar(&reviewer.nkey, "reviewer-nkey", "", "nkey seed file of the reviewer role (default: <auth dir>/reviewer.nk)")
	fs.StringVar(&host.creds, "host-creds", "", "credentials file of the host role (default: <auth dir>/host.nk)")
	fs.StringVar(&host.nkey, "host-nkey", "", "nkey seed file of the host role (default: <auth dir>/host.nk)")
	listen := fs.String("listen", console.DefaultListen, "address the console listens on (loopback unless --allow-remote)")
	allowRemote := fs.Bool("allow-remote", false, "allow a non-loopback --listen address (anyone who reaches it can sign with --key)")
	hostNames := fs.String("host-names", "", "comma-separated Host names the console answers to (default: loopback names; with --allow-remote: any)")
	keyFile := fs.String("key", "", "reviewer nkey seed file the console signs reviews with (required)")
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
	case *keyFile == "":
		return usageError(stderr, "console", "--key is required: the reviewer key the console signs with ('jingwei serve' keeps one in DATA/reviewer.nk, ./.jingwei/reviewer.nk by default; jingwei keys new makes one)")
	case *timeout <= 0 || *poll <= 0:
		return usageError(stderr, "console", "--timeout and --poll must be positive")
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
			return usageError(stderr, "console", "--listen %s is not a loopback address: the console has no login, so whoever reaches it signs with its key; give --allow-remote to do it anyway", *listen)
		}
		fmt.Fprintf(stderr, "jingwei console: WARNING: listening on %s, beyond this machine: anyone who reaches it can sign reviews with the console's key; put it behind an authenticating proxy\n", *listen)
		if len(allowed) == 0 {
			allowed = []string{"*"}
		}
	}
	kp, err := loadUserKey(*keyFile)
	if err != nil {
		return usageError(stderr, "console", "%v", err)
	}
	pub, _ := kp.PublicKey()

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
		Reviewer: rc, Host: hc, Key: kp, Prefix: n.prefix, Timeout: *timeout,
		PollInterval: *poll, AllowedHosts: allowed, Logger: lg, Metrics: ms.console(),
	})
	if err != nil {
		return usageError(stderr, "console", "%v", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return consoleFailure(stderr, fmt.Errorf("listen on %s: %w (is another console running? pick another --listen)", *listen, err))
	}
	ms.serve(ctx, "console", stderr)
	fmt.Fprintf(stdout, "jingwei console on http://%s/ (signing as %s; Ctrl-C to stop)\n", ln.Addr(), pub)
	if err := c.Serve(ctx, ln); err != nil {
		return consoleFailure(stderr, err)
	}
	return exitOK
}

// registerConsoleNATS registers the connection flags every client has
// but --creds and --nkey: the console has one set per role instead.
func registerConsoleNATS(fs *flag.FlagSet, n *natsFlags) {
	fs.StringVar(&n.server, "server", envOr("NATS_URL", stream.DefaultURL), "NATS server URL(s), comma separated (env NATS_URL)")
	fs.StringVar(&n.tlsca, "tlsca", envOr("NATS_CA", ""), "PEM file of CAs to verify the server's TLS certificate (env NATS_CA)")
	fs.StringVar(&n.prefix, "prefix", envOr("JINGWEI_PREFIX", "jw"), "subject prefix of the jingwei topology (env JINGWEI_PREFIX)")
	fs.StringVar(&n.auth, "auth", envOr("JINGWEI_AUTH", ""), "directory of role credentials (reviewer.nk, host.nk), used for a role without --<role>-creds/--<role>-nkey; default ./.jingwei/auth if it exists (env JINGWEI_AUTH)")
}

// connectConsole connects as one of the console's roles: its --<role>-creds
// or --<role>-nkey, else <auth dir>/<role>.nk, else without credentials.
func (n *natsFlags) connectConsole(ctx context.Context, cc consoleConn, log zerolog.Logger) (*nats.Conn, error) {
	nkey := cc.nkey
	if cc.creds == "" && nkey == "" {
		if dir := n.authDir(); dir != "" {
			if _, err := stream.KeyDir(dir).KeyPair(cc.role); err != nil {
				return nil, fmt.Errorf("role %s: %w", cc.role, err)
			}
			nkey = stream.KeyDir(dir).SeedFile(cc.role)
		}
	}
	nc, err := stream.Connect(ctx, stream.ConnectConfig{
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
	if errors.Is(err, stream.ErrBadKey) {
		return exitUsage
	}
	return exitFailure
}
